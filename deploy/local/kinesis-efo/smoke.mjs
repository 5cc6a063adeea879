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
import http from 'node:http'
import http2 from 'node:http2'
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
    return true
  } catch (e) {
    fail(name, e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e)
    return false
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
const MiB = 1024 * 1024
const mib = (n) => `${(n / MiB).toFixed(2)} MiB`
const getJson = (url) => fetch(url).then((x) => x.json())
const subscriptionsOf = async (endpoint, f) => (await getJson(`${endpoint}/_floe/subscriptions`)).Subscriptions.filter(f)

// AWS event stream messages in buf: [{headers: {name: value}, payload: Buffer}], and the bytes left over.
function decodeMessages(buf) {
  const out = []
  let off = 0
  while (buf.length - off >= 12 && buf.length - off >= buf.readUInt32BE(off)) {
    const total = buf.readUInt32BE(off)
    const hlen = buf.readUInt32BE(off + 4)
    const headers = {}
    for (let h = off + 12; h < off + 12 + hlen; ) {
      const n = buf.readUInt8(h)
      const name = buf.toString('utf8', h + 1, h + 1 + n)
      const vlen = buf.readUInt16BE(h + 2 + n)
      headers[name] = buf.toString('utf8', h + 4 + n, h + 4 + n + vlen)
      h += 4 + n + vlen
    }
    out.push({ headers, payload: buf.subarray(off + 12 + hlen, off + total - 4) })
    off += total
  }
  return { messages: out, rest: buf.subarray(off) }
}

// A raw SubscribeToShard (JSON built by hand, no signature) over HTTP/2 (h2c or TLS, node:http2 with
// the given session settings) or HTTP/1.1 (node:http). The client reads the first message, then
// pauses for pauseMs (no reads); the emulator's record of the subscription (Bytes, Events) is read
// at 2 s and at the end of the pause. Then it reads on until `want` records have come, and closes.
async function pausedSubscribe(endpoint, { consumerARN, shardId, want, h1 = false, settings, sessionWindow, pauseMs = 5000, ca }) {
  const body = JSON.stringify({ ConsumerARN: consumerARN, ShardId: shardId, StartingPosition: { Type: 'TRIM_HORIZON' } })
  const headers = { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': 'Kinesis_20131202.SubscribeToShard' }
  let session = null
  let stream
  const t0 = Date.now()
  if (h1) {
    const req = (endpoint.startsWith('https:') ? https : http).request(endpoint, { method: 'POST', headers: { ...headers, 'content-length': Buffer.byteLength(body) } })
    req.end(body)
    stream = await new Promise((res, rej) => {
      req.on('response', res)
      req.on('error', rej)
    })
    assert(stream.statusCode === 200, `HTTP ${stream.statusCode}`)
  } else {
    session = http2.connect(endpoint, { ...(settings ? { settings } : {}), ...(ca ? { ca } : {}) })
    session.on('error', () => {})
    if (sessionWindow) session.on('connect', () => session.setLocalWindowSize(sessionWindow))
    stream = session.request({ ':method': 'POST', ':path': '/', ...headers })
    stream.end(body)
    const h = await new Promise((res, rej) => {
      stream.on('response', res)
      stream.on('error', rej)
    })
    assert(h[':status'] === 200, `HTTP ${h[':status']}`)
  }
  stream.on('error', () => {})
  let buf = Buffer.alloc(0)
  const records = []
  const types = []
  let first = null
  let done = null
  const allIn = new Promise((r) => (done = r))
  stream.on('data', (d) => {
    const { messages, rest } = decodeMessages(Buffer.concat([buf, d]))
    buf = rest
    for (const m of messages) {
      types.push(m.headers[':event-type'] || m.headers[':exception-type'])
      if (m.headers[':event-type'] === 'SubscribeToShardEvent') records.push(...JSON.parse(m.payload.toString('utf8')).Records)
    }
    if (!first && types.length) {
      first = Date.now()
      stream.pause() // no more reads: the client's receive window (HTTP/2) or TCP buffers fill up
    }
    if (records.length >= want) done()
  })
  while (!first) await sleep(5)
  const mine = async () => {
    const l = await subscriptionsOf(endpoint, (x) => x.ConsumerARN === consumerARN && x.ShardId === shardId && x.StartedAt >= t0 - 1000)
    return l[l.length - 1]
  }
  await sleep(first + 2000 - Date.now())
  const at2 = await mine()
  await sleep(first + pauseMs - Date.now())
  const at5 = await mine()
  const readBeforeResume = records.length
  stream.resume()
  const tr = Date.now()
  await Promise.race([allIn, sleep(30000)])
  const resumedMs = Date.now() - tr
  if (session) {
    stream.close()
    session.close()
  } else stream.destroy()
  await sleep(200)
  const end = await mine()
  return { types, records, at2, at5, end, readBeforeResume, resumedMs }
}

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

// Back-pressure: 96 records of 256 KiB (24 MiB, 32 MiB as base64 in the events) on one shard, read by
// raw clients that pause after the first message. The emulator's subscription must stop (no more
// writes, so no more internal GetRecords) until the client reads again.
async function backPressureChecks(endpoint, k) {
  const N = 96
  const SIZE = 256 * 1024
  const stream = `efo-bp-${Date.now()}`
  const shard = 'shardId-000000000000'
  let consumerARN
  const put = []
  const ok = await check(`back-pressure setup: ${N} records of 256 KiB (${(N * SIZE) / MiB} MiB) on one shard, PutRecords of 4`, async () => {
    await k.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 1 }))
    const arn = (await waitStream(k, stream)).StreamARN
    for (let i = 0; i < N; i += 4) {
      const batch = []
      for (let j = i; j < i + 4; j++) {
        const d = Buffer.alloc(SIZE, 'x')
        d.write(`bp-${j}-`)
        batch.push({ Data: d, PartitionKey: `pk-${j}` })
      }
      const r = await k.send(new PutRecordsCommand({ StreamName: stream, Records: batch }))
      assert(r.FailedRecordCount === 0, 'failed records')
      put.push(...r.Records.map((x) => x.SequenceNumber))
    }
    consumerARN = (await k.send(new RegisterStreamConsumerCommand({ StreamARN: arn, ConsumerName: 'bp' }))).Consumer.ConsumerARN
    await waitConsumer(k, consumerARN, 'ACTIVE')
  })
  if (!ok) return
  const h2 = http2.getDefaultSettings()
  const variants = [
    [`HTTP/2, node:http2 default settings (initialWindowSize ${h2.initialWindowSize})`, {}, 4 * MiB],
    ['HTTP/2, initialWindowSize 65535 given explicitly', { settings: { initialWindowSize: 65535 } }, 4 * MiB],
    ['HTTP/2, 8 MiB stream window and 8 MiB connection window', { settings: { initialWindowSize: 8 * MiB }, sessionWindow: 8 * MiB }, 12 * MiB],
    ['HTTP/1.1 (only TCP stops it)', { h1: true }, 16 * MiB],
  ]
  for (const [label, opts, bound] of variants) {
    await check(`back-pressure, ${label}: the client reads the first message, then pauses 5 s: the subscription's Bytes stay below ${mib(bound)} and do not grow from 2 s to 5 s; after resume all ${N} records, in order; EndReason client_gone`, async () => {
      await sleep(COOLDOWN_MS + 100)
      const r = await pausedSubscribe(endpoint, { consumerARN, shardId: shard, want: N, ...opts })
      assert(r.at2 && r.at5 && r.end, 'no record of the subscription in /_floe/subscriptions')
      assert(r.types[0] === 'initial-response', `first message ${r.types[0]}`)
      assert(r.at5.Bytes === r.at2.Bytes && r.at5.Events === r.at2.Events, `grew while paused: ${r.at2.Bytes} B / ${r.at2.Events} events at 2 s, ${r.at5.Bytes} B / ${r.at5.Events} events at 5 s`)
      assert(r.at5.Bytes <= bound, `${mib(r.at5.Bytes)} written while paused`)
      assert(r.at5.EndedAt === null, `ended while paused: ${r.at5.EndReason}`)
      assert(r.records.length === N, `${r.records.length} records after resume`)
      assert(r.records.every((x, i) => x.SequenceNumber === put[i] && Buffer.from(x.Data, 'base64').toString('utf8', 0, 12).startsWith(`bp-${i}-`)), 'records differ or out of order')
      assert(r.end.EndReason === 'client_gone', `EndReason ${r.end.EndReason}`)
      return `Bytes ${r.at2.Bytes} (${mib(r.at2.Bytes)}) at 2 s and ${r.at5.Bytes} at 5 s, ${r.at5.Events} events (${r.at5.Records} records) written while paused, ${r.readBeforeResume} records read by the client before resume; all ${N} ${r.resumedMs} ms after resume; ${mib(r.end.Bytes)} in all`
    })
  }
}

// FLOE_EFO_POLLING_LIMITS=1: AWS's GetRecords limits per shard, shared by the polling callers; EFO
// does not count. Also the back-pressure checks (this emulator's subscriptions last 60 s).
async function limitsChecks() {
  let emu
  try {
    emu = await startEmulator(await freePort(), { FLOE_EFO_POLLING_LIMITS: '1', FLOE_EFO_SUBSCRIPTION_SECONDS: '60' })
  } catch (e) {
    return fail('polling limits: start', e.message)
  }
  const endpoint = emu.url
  const k = makeClient(endpoint)
  const stream = `efo-limits-${Date.now()}`
  const s0 = 'shardId-000000000000'
  const s1 = 'shardId-000000000001'
  const statsOf = async () => getJson(`${endpoint}/_floe/stats`)
  try {
    let it
    let grBefore
    await check(`FLOE_EFO_POLLING_LIMITS=1 (${endpoint}): 10 GetRecords in a tight loop on one shard -> 5 served, 5 ProvisionedThroughputExceededException; one more, raw: HTTP 400 with x-amzn-errortype; /_floe/stats counts them`, async () => {
      assert(emu.out.includes('polling limits on'), emu.out.trim())
      await k.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 2 }))
      await waitStream(k, stream)
      for (let i = 0; i < 20; i++) await k.send(new PutRecordCommand({ StreamName: stream, Data: Buffer.from(`l-${i}`), PartitionKey: 'p', ExplicitHashKey: '0' }))
      it = (await k.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: s0, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator
      let served = 0
      let refused = 0
      let records = 0
      let bytes = 0
      let msg = ''
      const t0 = Date.now()
      for (let i = 0; i < 10; i++) {
        try {
          const r = await k.send(new GetRecordsCommand({ ShardIterator: it, Limit: 2 }))
          served++
          records += r.Records.length
          bytes += r.Records.reduce((n, x) => n + x.Data.length, 0)
          it = r.NextShardIterator
        } catch (e) {
          assert(e.name === 'ProvisionedThroughputExceededException' && e.$metadata.httpStatusCode === 400, `${e.name} ${e.$metadata && e.$metadata.httpStatusCode}`)
          msg = e.message
          refused++
        }
      }
      const ms = Date.now() - t0
      assert(ms < 1000, `the loop took ${ms} ms`)
      assert(served === 5 && refused === 5, `${served} served, ${refused} refused`)
      assert(msg === `Rate exceeded for shard ${s0} in stream ${stream} under account 000000000000.`, msg)
      const raw = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': 'Kinesis_20131202.GetRecords' },
        body: JSON.stringify({ ShardIterator: it }),
      })
      const rb = await raw.json()
      assert(raw.status === 400 && raw.headers.get('x-amzn-errortype') === 'ProvisionedThroughputExceededException' && rb.__type === 'ProvisionedThroughputExceededException', `${raw.status} ${raw.headers.get('x-amzn-errortype')} ${JSON.stringify(rb)}`)
      grBefore = (await statsOf()).GetRecords[`${stream}/${s0}`]
      const want = { Calls: 11, Throttled: 6, Records: records, Bytes: bytes }
      assert(JSON.stringify(grBefore) === JSON.stringify(want), `stats ${JSON.stringify(grBefore)}, counted here ${JSON.stringify(want)}`)
      return `${ms} ms; ${msg}; stats ${JSON.stringify(grBefore)}`
    })
    await check('FLOE_EFO_POLLING_LIMITS=1: 2 MiB per second: 3 records of 900 KiB read with Limit 1: the 3rd call (would be 2.6 MiB in the last second) is refused, and served after a second', async () => {
      for (let i = 0; i < 3; i++) await k.send(new PutRecordCommand({ StreamName: stream, Data: Buffer.alloc(900 * 1024, 48 + i), PartitionKey: 'p', ExplicitHashKey: (2n ** 127n).toString() }))
      let it1 = (await k.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: s1, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator
      const got = []
      for (let i = 0; i < 2; i++) {
        const r = await k.send(new GetRecordsCommand({ ShardIterator: it1, Limit: 1 }))
        got.push(...r.Records)
        it1 = r.NextShardIterator
      }
      let name = 'served'
      try {
        await k.send(new GetRecordsCommand({ ShardIterator: it1, Limit: 1 }))
      } catch (e) {
        name = e.name
      }
      assert(name === 'ProvisionedThroughputExceededException', `3rd call: ${name}`)
      await sleep(1050)
      const r = await k.send(new GetRecordsCommand({ ShardIterator: it1, Limit: 1 }))
      got.push(...r.Records)
      assert(got.length === 3 && got.every((x, i) => x.Data.length === 900 * 1024 && x.Data[0] === 48 + i), 'records')
      const st = (await statsOf()).GetRecords[`${stream}/${s1}`]
      assert(st.Calls === 4 && st.Throttled === 1 && st.Records === 3 && st.Bytes === 3 * 900 * 1024, JSON.stringify(st))
      return JSON.stringify(st)
    })
    await check('FLOE_EFO_POLLING_LIMITS=1: a SubscribeToShard on that shard reads past the limits and is not counted under GetRecords; while it runs, 5 polling GetRecords a second are still served; /_floe/stats SubscribeToShard matches the subscription record', async () => {
      const arn = (await k.send(new DescribeStreamSummaryCommand({ StreamName: stream }))).StreamDescriptionSummary.StreamARN
      const c = (await k.send(new RegisterStreamConsumerCommand({ StreamARN: arn, ConsumerName: 'efo' }))).Consumer.ConsumerARN
      await waitConsumer(k, c, 'ACTIVE')
      await sleep(1050) // the polling window of the previous check is over
      let polled = 0
      let polledBytes = 0
      const st = await subscribe(k, { ConsumerARN: c, ShardId: s0, StartingPosition: { Type: 'TRIM_HORIZON' } }, {
        stop: (x) => {
          if (x.events.length === 1) {
            // while the subscription runs (it polls kinesalite every 250 ms, and read 20 records at once)
            ;(async () => {
              let i0 = (await k.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: s0, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator
              for (let i = 0; i < 5; i++) {
                const r = await k.send(new GetRecordsCommand({ ShardIterator: i0, Limit: 4 }))
                polled += r.Records.length
                polledBytes += r.Records.reduce((n, x) => n + x.Data.length, 0)
                i0 = r.NextShardIterator
              }
            })().catch((e) => (polled = e.name))
          }
          return x.events.length >= 8
        },
      })
      assert(st.end === 'abort' && st.records.length === 20, `${st.end} ${st.error} ${st.records.length}`)
      assert(polled === 20, `polling during the subscription: ${polled}`)
      await sleep(200)
      const stats = await statsOf()
      const gr = stats.GetRecords[`${stream}/${s0}`]
      const want = { Calls: grBefore.Calls + 5, Throttled: grBefore.Throttled, Records: grBefore.Records + 20, Bytes: grBefore.Bytes + polledBytes }
      assert(JSON.stringify(gr) === JSON.stringify(want), `GetRecords ${JSON.stringify(gr)}, want ${JSON.stringify(want)} (the 5 polling calls only)`)
      const rec = (await subscriptionsOf(endpoint, (x) => x.ConsumerARN === c && x.ShardId === s0))
      const es = stats.SubscribeToShard[`${stream}/${s0}`]
      assert(rec.length === 1 && rec[0].EndReason === 'client_gone', JSON.stringify(rec))
      assert(es.Subscriptions === 1 && es.Events === rec[0].Events && es.Records === rec[0].Records && es.Bytes === rec[0].Bytes && es.Records === 20 && es.Events >= 8, JSON.stringify(es))
      return `GetRecords ${JSON.stringify(gr)}; SubscribeToShard ${JSON.stringify(es)}`
    })
    await backPressureChecks(endpoint, k)
  } finally {
    k.destroy()
    stopChild(emu)
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

    await check('Floe_CutSubscriptions Mode reset ends with RST_STREAM (EndReason cut); DeregisterStreamConsumer closes an open subscription (EndReason deregistered)', async () => {
      let s0 = null
      const a = subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: children[0], StartingPosition: { Type: 'LATEST' } }, { stop: (x) => ((s0 = x), false) })
      while (!(s0 && s0.events.length)) await sleep(20) // past the cooldown, running
      const r = await fetch(`${endpoint}/_floe/cut`, { method: 'POST', body: JSON.stringify({ ConsumerARN: consumerARN, Mode: 'reset' }) }).then((x) => x.json())
      const sa = await a
      assert(r.Cut === 1 && sa.end === 'error', `cut ${r.Cut}, ${sa.end} ${sa.error}`)
      const g = (await k.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'gone' }))).Consumer.ConsumerARN
      await waitConsumer(k, g, 'ACTIVE')
      let s1 = null
      const b = subscribe(k, { ConsumerARN: g, ShardId: children[0], StartingPosition: { Type: 'LATEST' } }, { stop: (x) => ((s1 = x), false) })
      while (!(s1 && s1.events.length)) await sleep(20)
      await k.send(new DeregisterStreamConsumerCommand({ ConsumerARN: g }))
      const sb = await b
      assert(sb.end === 'end', `${sb.end} ${sb.error}`)
      return `reset: ${sa.error.name}: ${sa.error.message}`
    })

    await check('DeleteStream drops its consumers and closes their subscriptions (EndReason stream_deleted)', async () => {
      let s0 = null
      const a = subscribeRetry(k, { ConsumerARN: consumerARN, ShardId: children[1], StartingPosition: { Type: 'LATEST' } }, { stop: (x) => ((s0 = x), false) })
      while (!(s0 && s0.events.length)) await sleep(20)
      await k.send(new DeleteStreamCommand({ StreamName: stream }))
      const sa = await a
      assert(sa.end === 'end', `${sa.end} ${sa.error}`)
      try {
        await k.send(new DescribeStreamConsumerCommand({ ConsumerARN: consumerARN }))
        throw new Error('still there')
      } catch (e) {
        assert(e.name === 'ResourceNotFoundException', e.name)
      }
    })

    await check('GET /_floe/subscriptions (and Floe_ListSubscriptions): every subscription of this run, oldest first, with the EndReason of the way it ended; counters add up', async () => {
      await sleep(200)
      const all = await subscriptionsOf(endpoint, (x) => x.StreamName === stream)
      const viaTarget = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': 'Kinesis_20131202.Floe_ListSubscriptions' },
        body: '{}',
      }).then((x) => x.json())
      assert(JSON.stringify(viaTarget.Subscriptions.filter((x) => x.StreamName === stream)) === JSON.stringify(all), 'Floe_ListSubscriptions differs')
      const want = [
        'client_gone', 'client_gone', 'client_gone', 'client_gone', 'client_gone', 'client_gone', // TRIM_HORIZON .. AT_TIMESTAMP
        'taken_over', 'client_gone', // the takeover check
        'cut', 'cut', // cut: close and error modes
        ...(emu ? ['expired'] : []),
        'shard_end', // SplitShard
        'client_gone', 'client_gone', // HTTP/1.1, the two children
        'cut', 'deregistered', // reset mode; deregistration
        'stream_deleted',
      ]
      const got = all.map((x) => x.EndReason)
      assert(JSON.stringify(got) === JSON.stringify(want), `EndReasons ${got.join(',')}, want ${want.join(',')}`)
      assert(all.every((x, i) => x.ConsumerARN && x.ShardId && typeof x.StartedAt === 'number' && x.EndedAt >= x.StartedAt && (i === 0 || x.StartedAt >= all[i - 1].StartedAt)), 'times')
      assert(all[0].Records === 30 && all[0].ShardId === shard0 && all[0].Bytes > all[0].Records * 10, JSON.stringify(all[0]))
      const split = all[want.indexOf('shard_end')]
      assert(split.Records === sent.length, `shard_end record: ${split.Records} records`)
      const stats = await getJson(`${endpoint}/_floe/stats`)
      const s0 = stats.SubscribeToShard[`${stream}/${shard0}`]
      const mine = all.filter((x) => x.ShardId === shard0)
      const sum = (f) => mine.reduce((n, x) => n + x[f], 0)
      assert(s0.Subscriptions === mine.length && s0.Events === sum('Events') && s0.Records === sum('Records') && s0.Bytes === sum('Bytes'), `stats ${JSON.stringify(s0)}`)
      const g0 = stats.GetRecords[`${stream}/${shard0}`]
      assert(g0 && g0.Calls > 0 && g0.Throttled === 0, `GetRecords ${JSON.stringify(g0)}`)
      return `${all.length} subscriptions; ${shard0}: SubscribeToShard ${JSON.stringify(s0)}, GetRecords (pollAll) ${JSON.stringify(g0)}`
    })
  } finally {
    k.destroy()
    k1.destroy()
    stopChild(emu)
  }
  if (emu) await limitsChecks()
  else {
    const kb = makeClient(endpoint)
    await backPressureChecks(endpoint, kb)
    kb.destroy()
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
