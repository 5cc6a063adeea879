// Smoke test of kinesis-efo.js with the official AWS SDK for JavaScript v3 (@aws-sdk/client-kinesis).
//   node smoke.mjs            starts kinesis-efo.js on a free port (or FLOE_EFO_PORT), runs the checks, stops it;
//                             then a TLS one, and one in upstream mode in front of a plain kinesalite
//   FLOE_EFO_ENDPOINT=http://127.0.0.1:N node smoke.mjs   uses a running emulator (lifetime, TLS and upstream
//                             checks skipped); set FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS to that emulator's (default 5000)
// Prints one PASS/FAIL line per check; exits 1 on any FAIL.
import { spawn } from 'node:child_process'
import net from 'node:net'
import fs from 'node:fs'
import os from 'node:os'
import tls from 'node:tls'
import https from 'node:https'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  KinesisClient, CreateStreamCommand, DescribeStreamSummaryCommand, PutRecordsCommand, PutRecordCommand,
  RegisterStreamConsumerCommand, DescribeStreamConsumerCommand, DeregisterStreamConsumerCommand,
  ListStreamConsumersCommand, SubscribeToShardCommand, GetShardIteratorCommand, GetRecordsCommand,
  SplitShardCommand, ListShardsCommand, DeleteStreamCommand,
} from '@aws-sdk/client-kinesis'
import { NodeHttpHandler, NodeHttp2Handler } from '@smithy/node-http-handler'

const here = path.dirname(fileURLToPath(import.meta.url))
const LIFETIME_S = 4
// The re-subscribe cooldown: short for the emulators started here (speed), the emulator's own for a running one.
const COOLDOWN_MS = Number(process.env.FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS || (process.env.FLOE_EFO_ENDPOINT ? 5000 : 600))
let failures = 0
const pass = (name, extra) => console.log(`PASS ${name}${extra ? ` (${extra})` : ''}`)
const fail = (name, why) => {
  failures++
  console.log(`FAIL ${name}: ${why}`)
}
async function check(name, fn) {
  try {
    const extra = await fn()
    pass(name, extra)
  } catch (e) {
    fail(name, e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e)
  }
}
const assert = (c, msg) => {
  if (!c) throw new Error(msg)
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer()
    s.once('error', rej)
    s.listen(0, '127.0.0.1', () => {
      const port = s.address().port
      s.close(() => res(port))
    })
  })
}

// Starts a node script and resolves once it prints "Listening at URL".
function startNode(script, args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
      const m = /Listening at (\S+)/.exec(out)
      if (m) resolve({ child, url: m[1], out })
    })
    child.on('exit', (code) => reject(new Error(`${path.basename(script)} exited (${code}): ${out}`)))
  })
}
function startEmulator(port, extraEnv, { script = path.join(here, 'kinesis-efo.js'), args = [] } = {}) {
  return startNode(script, ['--port', String(port), ...args], {
    ...process.env,
    FLOE_EFO_SUBSCRIPTION_SECONDS: String(LIFETIME_S),
    FLOE_EFO_CONSUMER_CREATE_MS: '300',
    FLOE_EFO_CONSUMER_DELETE_MS: '300',
    FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS: String(COOLDOWN_MS),
    ...extraEnv,
  })
}
function stopChild(p) {
  if (!p) return
  p.child.removeAllListeners('exit')
  p.child.kill('SIGTERM')
}

const creds = { accessKeyId: 'test', secretAccessKey: 'test' }
function makeClient(endpoint, handler) {
  // The SDK's default for Kinesis is NodeHttp2Handler (HTTP/2; h2c prior knowledge for http://).
  return new KinesisClient({ endpoint, region: 'us-east-1', credentials: creds, maxAttempts: 1, ...(handler ? { requestHandler: handler } : {}) })
}

async function waitStream(k, name, want = 'ACTIVE') {
  for (let i = 0; i < 100; i++) {
    const s = (await k.send(new DescribeStreamSummaryCommand({ StreamName: name }))).StreamDescriptionSummary
    if (s.StreamStatus === want) return s
    await sleep(50)
  }
  throw new Error(`stream ${name} not ${want}`)
}
async function waitConsumer(k, arn, want) {
  for (let i = 0; i < 100; i++) {
    const d = (await k.send(new DescribeStreamConsumerCommand({ ConsumerARN: arn }))).ConsumerDescription
    if (d.ConsumerStatus === want) return d
    await sleep(50)
  }
  throw new Error(`consumer ${arn} not ${want}`)
}
async function putN(k, stream, n, tag) {
  const seqs = []
  for (let i = 0; i < n; i += 500) {
    const batch = []
    for (let j = i; j < Math.min(n, i + 500); j++) {
      batch.push({ Data: Buffer.from(`${tag}-${j}-` + 'x'.repeat(j % 7)), PartitionKey: `pk-${j}` })
    }
    const r = await k.send(new PutRecordsCommand({ StreamName: stream, Records: batch }))
    assert(r.FailedRecordCount === 0, 'failed records')
    for (const x of r.Records) seqs.push({ seq: x.SequenceNumber, shard: x.ShardId })
  }
  return seqs
}
// All records of a shard through the polling path (GetShardIterator/GetRecords).
async function pollAll(k, stream, shardId) {
  let it = (await k.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator
  const out = []
  for (let i = 0; i < 1000 && it; i++) {
    const r = await k.send(new GetRecordsCommand({ ShardIterator: it }))
    out.push(...r.Records)
    if (!r.Records.length && r.MillisBehindLatest === 0 && r.NextShardIterator) {
      // open shard: stop at the tip
      const r2 = await k.send(new GetRecordsCommand({ ShardIterator: r.NextShardIterator }))
      out.push(...r2.Records)
      if (!r2.Records.length) break
      it = r2.NextShardIterator
      continue
    }
    it = r.NextShardIterator
  }
  return out
}

// Runs one subscription. stop(state) -> true aborts it (like a client closing the stream).
// Resolves with {events, records, end: 'end'|'abort'|'timeout'|'error', error, ms}.
async function subscribe(k, params, { stop = () => false, timeoutMs = 10000 } = {}) {
  const ac = new AbortController()
  const t0 = Date.now()
  const st = { events: [], records: [], end: null, error: null }
  const timer = setTimeout(() => {
    st.end = 'timeout'
    ac.abort()
  }, timeoutMs)
  try {
    const r = await k.send(new SubscribeToShardCommand(params), { abortSignal: ac.signal })
    for await (const ev of r.EventStream) {
      if (ev.SubscribeToShardEvent) {
        st.events.push(ev.SubscribeToShardEvent)
        st.records.push(...ev.SubscribeToShardEvent.Records)
      } else {
        st.events.push(ev)
      }
      if (stop(st)) {
        st.end = 'abort'
        ac.abort()
        break
      }
    }
    if (!st.end) st.end = 'end'
  } catch (e) {
    if (!st.end) {
      st.end = 'error'
      st.error = e
    }
  } finally {
    clearTimeout(timer)
  }
  st.ms = Date.now() - t0
  return st
}
// SubscribeToShard, retrying ResourceInUseException while the re-subscribe cooldown runs.
async function subscribeRetry(k, params, opts) {
  const until = Date.now() + COOLDOWN_MS + 2000
  for (;;) {
    const st = await subscribe(k, params, opts)
    if (st.end === 'error' && st.error.name === 'ResourceInUseException' && !st.events.length && Date.now() < until) {
      await sleep(100)
      continue
    }
    return st
  }
}
const lastCont = (st) => {
  const evs = st.events.filter((e) => e.ContinuationSequenceNumber)
  return evs.length ? evs[evs.length - 1].ContinuationSequenceNumber : undefined
}
const dataStr = (r) => Buffer.from(r.Data).toString('utf8')

// FLOE_EFO_TLS=1: a second emulator with a generated CA + server certificate; h2 by ALPN.
async function tlsChecks() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'efo-tls-'))
  let emu
  try {
    emu = await startEmulator(await freePort(), { FLOE_EFO_TLS: '1', FLOE_EFO_TLS_DIR: dir })
  } catch (e) {
    return fail('TLS mode: start', e.message)
  }
  const ca = fs.readFileSync(path.join(dir, 'ca.pem'))
  const k = makeClient(emu.url, new NodeHttp2Handler({ nodeHttp2ConnectOptions: { ca } }))
  const k1 = makeClient(emu.url, new NodeHttpHandler({ httpsAgent: new https.Agent({ ca }) }))
  const stream = `efo-tls-${Date.now()}`
  try {
    await check(`TLS mode (${emu.url}): ALPN offers h2`, async () => {
      const u = new URL(emu.url)
      const proto = await new Promise((res, rej) => {
        const s = tls.connect({ host: u.hostname, port: Number(u.port), ca, ALPNProtocols: ['h2', 'http/1.1'] }, () => {
          res(s.alpnProtocol)
          s.end()
        })
        s.on('error', rej)
      })
      assert(proto === 'h2', String(proto))
      return `CA ${path.join(dir, 'ca.pem')}`
    })
    await check('TLS mode: SDK over h2 (ALPN) subscribes and reads; HTTP/1.1 over TLS too', async () => {
      await k.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 1 }))
      const arn = (await waitStream(k, stream)).StreamARN
      await putN(k1, stream, 12, 't')
      const c = (await k.send(new RegisterStreamConsumerCommand({ StreamARN: arn, ConsumerName: 'floe' }))).Consumer
      await waitConsumer(k, c.ConsumerARN, 'ACTIVE')
      const p = { ConsumerARN: c.ConsumerARN, ShardId: 'shardId-000000000000', StartingPosition: { Type: 'TRIM_HORIZON' } }
      const st = await subscribe(k, p, { stop: (s) => s.records.length >= 12 })
      assert(st.end === 'abort' && st.records.length === 12, `h2: ${st.end} ${st.records.length} ${st.error}`)
      const st1 = await subscribeRetry(k1, p, { stop: (s) => s.records.length >= 12 })
      assert(st1.end === 'abort' && st1.records.length === 12, `http/1.1: ${st1.end} ${st1.records.length} ${st1.error}`)
      await k.send(new DeleteStreamCommand({ StreamName: stream }))
    })
  } finally {
    k.destroy()
    k1.destroy()
    stopChild(emu)
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

// Upstream mode (as deploy/local/aws-emulators.sh runs it): a plain kinesalite (deploy/local/kinesalite.js)
// and kinesis-efo.js --upstream in front of it. The emulator runs from a copy in a directory without
// node_modules, so it must not need kinesalite itself.
async function upstreamChecks() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'efo-upstream-'))
  let kl, emu
  try {
    kl = await startNode(path.join(here, '..', 'kinesalite.js'),
      ['--host', '127.0.0.1', '--port', String(await freePort()), '--shardLimit', '100', '--createStreamMs', '50', '--deleteStreamMs', '50', '--updateStreamMs', '50'],
      { ...process.env, NODE_PATH: path.join(here, 'node_modules') })
    fs.copyFileSync(path.join(here, 'kinesis-efo.js'), path.join(tmp, 'kinesis-efo.js'))
    emu = await startEmulator(await freePort(), {}, { script: path.join(tmp, 'kinesis-efo.js'), args: ['--upstream', kl.url] })
  } catch (e) {
    stopChild(kl)
    fs.rmSync(tmp, { recursive: true, force: true })
    return fail('upstream mode: start', e.message)
  }
  const kk = makeClient(kl.url, new NodeHttpHandler()) // kinesalite itself speaks HTTP/1.1 only
  const k = makeClient(emu.url)
  const stream = `efo-up-${Date.now()}`
  const shard0 = 'shardId-000000000000'
  try {
    let arn, consumerARN
    await check(`upstream mode (${emu.url} in front of ${kl.url}, started without kinesalite in its directory): a stream created and written on kinesalite is listed, registered for and subscribed through the front, same records as GetRecords on kinesalite`, async () => {
      assert(emu.out.includes(`upstream ${kl.url}`), emu.out.trim())
      await kk.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 1 }))
      arn = (await waitStream(kk, stream)).StreamARN
      const put = await putN(kk, stream, 25, 'u')
      const shards = (await k.send(new ListShardsCommand({ StreamARN: arn }))).Shards
      assert(shards.length === 1 && shards[0].ShardId === shard0, JSON.stringify(shards))
      consumerARN = (await k.send(new RegisterStreamConsumerCommand({ StreamARN: arn, ConsumerName: 'floe' }))).Consumer.ConsumerARN
      await waitConsumer(k, consumerARN, 'ACTIVE')
      const st = await subscribe(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'TRIM_HORIZON' } }, { stop: (s) => s.records.length >= 25 })
      const polled = await pollAll(kk, stream, shard0)
      assert(st.end === 'abort' && st.records.length === 25 && polled.length === 25, `${st.end} ${st.error} ${st.records.length} ${polled.length}`)
      assert(st.records.every((r, i) => r.SequenceNumber === polled[i].SequenceNumber && r.SequenceNumber === put[i].seq && dataStr(r) === dataStr(polled[i])), 'records differ')
      return `${st.records.length} records`
    })
    await check('upstream mode: SplitShard on kinesalite -> the parent subscription through the front ends with ChildShards (from the upstream ListShards)', async () => {
      await kk.send(new SplitShardCommand({ StreamName: stream, ShardToSplit: shard0, NewStartingHashKey: (2n ** 127n).toString() }))
      await waitStream(kk, stream)
      const st = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'TRIM_HORIZON' } }, { timeoutMs: 8000 })
      const last = st.events[st.events.length - 1]
      assert(st.end === 'end' && st.records.length === 25 && last.ChildShards && last.ChildShards.length === 2, `${st.end} ${st.error} ${st.records.length} ${JSON.stringify(last && last.ChildShards)}`)
      return last.ChildShards.map((c) => c.ShardId).join(', ')
    })
    await check('upstream mode: a stream deleted and re-created on kinesalite directly has none of the old consumers', async () => {
      await kk.send(new DeleteStreamCommand({ StreamName: stream }))
      for (let i = 0; i < 100; i++) {
        try {
          await kk.send(new DescribeStreamSummaryCommand({ StreamName: stream }))
          await sleep(50)
        } catch (e) {
          break
        }
      }
      await sleep(1100) // a later creation second
      await kk.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 1 }))
      const arn2 = (await waitStream(kk, stream)).StreamARN
      const r = await k.send(new ListStreamConsumersCommand({ StreamARN: arn2 }))
      assert(r.Consumers.length === 0, JSON.stringify(r.Consumers))
      await kk.send(new DeleteStreamCommand({ StreamName: stream }))
    })
  } finally {
    k.destroy()
    kk.destroy()
    stopChild(emu)
    stopChild(kl)
    fs.rmSync(tmp, { recursive: true, force: true })
  }
}

async function main() {
  let emu = null
  let endpoint = process.env.FLOE_EFO_ENDPOINT
  if (!endpoint) {
    const port = process.env.FLOE_EFO_PORT ? Number(process.env.FLOE_EFO_PORT) : await freePort()
    emu = await startEmulator(port)
    endpoint = emu.url
    console.log(`emulator: ${endpoint} (pid ${emu.child.pid})`)
  }
  const k = makeClient(endpoint) // default handler: NodeHttp2Handler, h2c
  const k1 = makeClient(endpoint, new NodeHttpHandler()) // HTTP/1.1 for everything
  const stream = `efo-smoke-${Date.now()}`
  let streamARN, consumerARN
  const shard0 = 'shardId-000000000000'
  const sent = []

  try {
    await check('create stream (h2c, via kinesalite) and put 30 records', async () => {
      await k.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 1 }))
      streamARN = (await waitStream(k, stream)).StreamARN
      sent.push(...(await putN(k, stream, 30, 'a')))
      return streamARN
    })

    await check('ListShards with StreamARN only (translated to StreamName for kinesalite)', async () => {
      const r = await k.send(new ListShardsCommand({ StreamARN: streamARN }))
      assert(r.Shards.length === 1 && r.Shards[0].ShardId === shard0, JSON.stringify(r.Shards))
    })

    await check('RegisterStreamConsumer -> CREATING, then ACTIVE; ARN format', async () => {
      const r = await k.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'floe' }))
      assert(r.Consumer.ConsumerStatus === 'CREATING', r.Consumer.ConsumerStatus)
      assert(r.Consumer.ConsumerCreationTimestamp instanceof Date, 'timestamp not a Date')
      consumerARN = r.Consumer.ConsumerARN
      assert(new RegExp(`^${streamARN.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}/consumer/floe:\\d+$`).test(consumerARN), consumerARN)
      const d = await waitConsumer(k, consumerARN, 'ACTIVE')
      assert(d.StreamARN === streamARN, 'StreamARN')
      return consumerARN
    })

    await check('RegisterStreamConsumer duplicate -> ResourceInUseException', async () => {
      try {
        await k.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'floe' }))
        throw new Error('no error')
      } catch (e) {
        assert(e.name === 'ResourceInUseException', e.name)
      }
    })

    await check('DescribeStreamConsumer by StreamARN+ConsumerName; missing -> ResourceNotFoundException', async () => {
      const d = (await k.send(new DescribeStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'floe' }))).ConsumerDescription
      assert(d.ConsumerARN === consumerARN && d.ConsumerStatus === 'ACTIVE', JSON.stringify(d))
      for (const p of [{ StreamARN: streamARN, ConsumerName: 'nope' }, { ConsumerARN: consumerARN.replace('/floe:', '/nope:') }]) {
        try {
          await k.send(new DescribeStreamConsumerCommand(p))
          throw new Error('no error')
        } catch (e) {
          assert(e.name === 'ResourceNotFoundException', e.name)
        }
      }
    })

    await check('20 consumers per stream, the 21st -> LimitExceededException; ListStreamConsumers pages', async () => {
      for (let i = 1; i < 20; i++) await k.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: `extra${i}` }))
      try {
        await k.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'extra20' }))
        throw new Error('no error')
      } catch (e) {
        assert(e.name === 'LimitExceededException', e.name)
      }
      const names = []
      let tok
      do {
        const r = await k.send(new ListStreamConsumersCommand(tok ? { StreamARN: streamARN, NextToken: tok, MaxResults: 7 } : { StreamARN: streamARN, MaxResults: 7 }))
        names.push(...r.Consumers.map((c) => c.ConsumerName))
        tok = r.NextToken
      } while (tok)
      assert(names.length === 20 && names[0] === 'floe', names.join(','))
    })

    await check('DeregisterStreamConsumer -> DELETING, then gone', async () => {
      for (let i = 1; i < 20; i++) await k.send(new DeregisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: `extra${i}` }))
      const d = (await k.send(new DescribeStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'extra1' }))).ConsumerDescription
      assert(d.ConsumerStatus === 'DELETING', d.ConsumerStatus)
      await sleep(500)
      try {
        await k.send(new DescribeStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'extra1' }))
        throw new Error('still there')
      } catch (e) {
        assert(e.name === 'ResourceNotFoundException', e.name)
      }
      const r = await k.send(new ListStreamConsumersCommand({ StreamARN: streamARN }))
      assert(r.Consumers.length === 1, String(r.Consumers.length))
    })

    let contAfter30
    await check('SubscribeToShard TRIM_HORIZON over h2c: all 30 records, in order, same as GetRecords', async () => {
      const st = await subscribe(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'TRIM_HORIZON' } }, { stop: (s) => s.records.length >= 30 })
      assert(st.end === 'abort', `${st.end} ${st.error}`)
      const polled = await pollAll(k, stream, shard0)
      assert(st.records.length === 30, `got ${st.records.length}`)
      assert(JSON.stringify(st.records.map((r) => r.SequenceNumber)) === JSON.stringify(polled.map((r) => r.SequenceNumber)), 'sequence numbers differ from polling')
      assert(st.records.every((r, i) => dataStr(r) === dataStr(polled[i]) && r.PartitionKey === polled[i].PartitionKey), 'data differs')
      assert(st.records.every((r) => r.ApproximateArrivalTimestamp instanceof Date), 'timestamps')
      contAfter30 = lastCont(st)
      assert(contAfter30 === st.records[29].SequenceNumber, `continuation ${contAfter30} != last record ${st.records[29].SequenceNumber}`)
      return `${st.events.length} event(s), ${st.ms} ms`
    })

    let contEmpty
    await check('AFTER_SEQUENCE_NUMBER with a record continuation: the next 20, no gap, no repeat', async () => {
      sent.push(...(await putN(k, stream, 20, 'b')))
      const st = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: contAfter30 } }, { stop: (s) => s.events.length >= 3 && s.events[s.events.length - 1].Records.length === 0 })
      assert(st.records.length === 20, `got ${st.records.length}`)
      assert(st.records.every((r, i) => r.SequenceNumber === sent[30 + i].seq), 'wrong records')
      contEmpty = lastCont(st)
      assert(st.events[st.events.length - 1].Records.length === 0 && contEmpty, 'no empty event with continuation')
    })

    await check('AFTER_SEQUENCE_NUMBER with an empty-event continuation: exactly the records put since', async () => {
      sent.push(...(await putN(k, stream, 5, 'c')))
      const st = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: contEmpty } }, { stop: (s) => s.events.length >= 3 })
      assert(st.records.length === 5 && st.records.every((r, i) => r.SequenceNumber === sent[50 + i].seq), `got ${st.records.map(dataStr)}`)
      assert(BigInt(contEmpty) < BigInt(st.records[0].SequenceNumber), 'continuation not below the next record')
    })

    await check('AT_SEQUENCE_NUMBER and LATEST', async () => {
      const at = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'AT_SEQUENCE_NUMBER', SequenceNumber: sent[10].seq } }, { stop: (s) => s.records.length >= 45 })
      assert(at.records.length === 45 && at.records[0].SequenceNumber === sent[10].seq, `AT: ${at.records.length}`)
      let putDone = false
      const lp = subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'LATEST' } }, {
        stop: (s) => {
          if (s.events.length === 1 && !putDone) {
            putDone = true
            putN(k, stream, 3, 'd').then((x) => sent.push(...x))
          }
          return s.records.length >= 3
        },
      })
      const l = await lp
      assert(l.records.length === 3 && dataStr(l.records[0]).startsWith('d-0'), `LATEST: ${l.records.map(dataStr)}`)
    })

    await check('AT_TIMESTAMP', async () => {
      await sleep(1100)
      const t = new Date()
      await sleep(50)
      sent.push(...(await putN(k, stream, 2, 'e')))
      const st = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'AT_TIMESTAMP', Timestamp: t } }, { stop: (s) => s.records.length >= 2 })
      assert(st.records.length === 2 && dataStr(st.records[0]).startsWith('e-0'), st.records.map(dataStr).join())
    })

    await check(`SubscribeToShard again within FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS=${COOLDOWN_MS} -> HTTP 400 ResourceInUseException, the open one keeps running; after it the new call takes over and the old one fails with ResourceInUseException`, async () => {
      const p = { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'LATEST' } }
      let sa = null
      const a = subscribeRetry(k, p, { stop: (s) => ((sa = s), false), timeoutMs: COOLDOWN_MS + 10000 })
      for (const until = Date.now() + COOLDOWN_MS + 3000; Date.now() < until && !(sa && sa.events.length); ) await sleep(20)
      assert(sa && sa.events.length, 'first subscription got no event')
      const tA = Date.now() // a's successful call was before this
      const b = await subscribe(k, p, { timeoutMs: 3000 })
      assert(Date.now() - tA < COOLDOWN_MS, 'the refusal check itself took longer than the cooldown')
      assert(b.end === 'error' && b.error.name === 'ResourceInUseException' && !b.events.length, `within the cooldown: ${b.end} ${b.error && b.error.name}`)
      assert(b.error.$metadata.httpStatusCode === 400, String(b.error.$metadata.httpStatusCode))
      const n = sa.events.length
      await sleep(Math.max(0, tA + COOLDOWN_MS + 100 - Date.now()))
      assert(sa.events.length > n && !sa.end, `the first one stopped after the refused call: ${sa.end}, ${sa.events.length} events`)
      let putDone = false
      const c = subscribe(k, p, {
        stop: (s) => {
          if (!putDone) {
            putDone = true
            putN(k, stream, 2, 'tk').then((x) => sent.push(...x))
          }
          return s.records.length >= 2
        },
      })
      const ra = await a
      assert(ra.end === 'error' && ra.error.name === 'ResourceInUseException', `old one after the takeover: ${ra.end} ${ra.error && ra.error.name}`)
      const rc = await c
      assert(rc.end === 'abort' && rc.records.length === 2 && dataStr(rc.records[0]).startsWith('tk-0'), `new one: ${rc.end} ${rc.error} ${rc.records.map(dataStr)}`)
      return `refused in ${b.ms} ms; old one: ${ra.error.name}: ${ra.error.message}; idle events every ~${Math.round(ra.ms / ra.events.length)} ms`
    })

    await check('Floe_CutSubscriptions (POST /_floe/cut): close mode ends the SDK iterator cleanly, error mode throws', async () => {
      const a = subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'LATEST' } })
      await sleep(COOLDOWN_MS + 400) // past the cooldown of the previous check's subscription
      const r = await fetch(`${endpoint}/_floe/cut`, { method: 'POST', body: JSON.stringify({ ConsumerARN: consumerARN }) }).then((x) => x.json())
      const sa = await a
      assert(r.Cut === 1 && sa.end === 'end', `cut ${r.Cut}, ${sa.end} ${sa.error}`)
      const b = subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'LATEST' } })
      await sleep(COOLDOWN_MS + 400)
      // the same through the JSON API target, with an exception event
      const k1r = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': 'Kinesis_20131202.Floe_CutSubscriptions' },
        body: JSON.stringify({ ShardId: shard0, Mode: 'error', ErrorType: 'InternalFailureException', Message: 'cut for a test' }),
      }).then((x) => x.json())
      const sb = await b
      assert(k1r.Cut === 1 && sb.end === 'error' && sb.error.name === 'InternalFailureException', `${k1r.Cut} ${sb.end} ${sb.error && sb.error.name}`)
      return `error: ${sb.error.name}: ${sb.error.message}`
    })

    if (emu) {
      await check(`subscription ends by itself after FLOE_EFO_SUBSCRIPTION_SECONDS=${LIFETIME_S}`, async () => {
        const st = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'LATEST' } }, { timeoutMs: (LIFETIME_S + 5) * 1000 })
        assert(st.end === 'end' && st.ms >= LIFETIME_S * 1000 - 100 && st.ms < LIFETIME_S * 1000 + 2000, `${st.end} after ${st.ms} ms`)
        return `${st.ms} ms, ${st.events.length} events`
      })
    }

    let children
    await check('SplitShard: the parent subscription ends with its records, then ChildShards (no continuation)', async () => {
      await k.send(new SplitShardCommand({ StreamName: stream, ShardToSplit: shard0, NewStartingHashKey: (2n ** 127n).toString() }))
      await waitStream(k, stream)
      const after = await putN(k, stream, 40, 'f') // go to the children
      assert(after.every((x) => x.shard !== shard0), 'records still went to the parent')
      const st = await subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: shard0, StartingPosition: { Type: 'TRIM_HORIZON' } }, { timeoutMs: 8000 })
      assert(st.end === 'end', `${st.end} ${st.error}`)
      const polled = await pollAll(k, stream, shard0)
      assert(st.records.length === polled.length && st.records.length === sent.length, `${st.records.length} vs polled ${polled.length} vs sent ${sent.length}`)
      assert(st.records.every((r, i) => r.SequenceNumber === polled[i].SequenceNumber), 'differs from polling')
      const last = st.events[st.events.length - 1]
      assert(last.ChildShards && last.ChildShards.length === 2, `last event ChildShards: ${JSON.stringify(last.ChildShards)}`)
      assert(last.ContinuationSequenceNumber === undefined, 'last event has a continuation')
      assert(st.events.slice(0, -1).every((e) => !e.ChildShards), 'ChildShards before the last event')
      assert(last.ChildShards.every((c) => c.ParentShards.length === 1 && c.ParentShards[0] === shard0 && c.HashKeyRange.StartingHashKey), 'child shape')
      children = last.ChildShards.map((c) => c.ShardId)
      return `${st.records.length} records, ${st.events.length} events, children ${children.join(', ')}`
    })

    await check('SubscribeToShard over HTTP/1.1 (NodeHttpHandler, chunked event stream) on the children', async () => {
      let total = 0
      for (const c of children) {
        const st = await subscribeRetry(k1, { ConsumerARN: consumerARN, ShardId: c, StartingPosition: { Type: 'TRIM_HORIZON' } }, { stop: (s) => s.events.length >= 2 && s.events[s.events.length - 1].Records.length === 0 })
        assert(st.end === 'abort', `${st.end} ${st.error}`)
        const polled = await pollAll(k1, stream, c)
        assert(st.records.length === polled.length && st.records.every((r, i) => r.SequenceNumber === polled[i].SequenceNumber), `${c}: ${st.records.length} vs ${polled.length}`)
        total += st.records.length
      }
      assert(total === 40, `children hold ${total}`)
    })

    await check('SubscribeToShard errors: unknown shard -> ResourceNotFoundException; CREATING consumer -> ResourceInUseException', async () => {
      const a = await subscribe(k, { ConsumerARN: consumerARN, ShardId: 'shardId-000000000099', StartingPosition: { Type: 'LATEST' } })
      assert(a.end === 'error' && a.error.name === 'ResourceNotFoundException', `${a.end} ${a.error && a.error.name}`)
      const r = await k.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'young' }))
      const b = await subscribe(k, { ConsumerARN: r.Consumer.ConsumerARN, ShardId: shard0, StartingPosition: { Type: 'LATEST' } })
      assert(b.end === 'error' && b.error.name === 'ResourceInUseException', `${b.end} ${b.error && b.error.name}`)
    })

    await check('DeleteStream drops its consumers', async () => {
      await k.send(new DeleteStreamCommand({ StreamName: stream }))
      try {
        await k.send(new DescribeStreamConsumerCommand({ ConsumerARN: consumerARN }))
        throw new Error('still there')
      } catch (e) {
        assert(e.name === 'ResourceNotFoundException', e.name)
      }
    })
  } finally {
    k.destroy()
    k1.destroy()
    stopChild(emu)
  }
  if (emu) await tlsChecks()
  if (emu) await upstreamChecks()
  console.log(failures ? `${failures} FAILED` : 'ALL PASSED')
  process.exit(failures ? 1 : 0)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
