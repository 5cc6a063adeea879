#!/usr/bin/env node
// kinesis-efo.js: a local Kinesis with enhanced fan-out, for floe's tests.
//
// Ordinary Kinesis operations go to kinesalite 3.3.3: by default one that runs in this process on
// an internal 127.0.0.1 port, or, with --upstream URL (FLOE_EFO_UPSTREAM), an already running
// kinesalite at URL (then kinesalite is not loaded here; only Node builtins are needed). The EFO
// operations are implemented here: RegisterStreamConsumer, DescribeStreamConsumer,
// DeregisterStreamConsumer, ListStreamConsumers and SubscribeToShard (AWS event stream over HTTP/2
// or HTTP/1.1; records come from kinesalite's GetShardIterator/GetRecords, so they are exactly
// those of the polling path). A subscription stops when its client stops reading (it waits for
// 'drain' before each message and each internal GetRecords).
//
// For tests: GET /_floe/subscriptions (a record of every subscription and how it ended), GET
// /_floe/stats (per-shard counters of GetRecords through the front and of SubscribeToShard),
// POST /_floe/cut (end subscriptions), and FLOE_EFO_POLLING_LIMITS=1 (AWS's per-shard GetRecords
// limits for polling consumers; the internal reads of SubscribeToShard are not limited).
//
// One port serves HTTP/1.1 and cleartext HTTP/2 with prior knowledge (h2c), told apart by the
// first bytes of each connection; with FLOE_EFO_TLS=1 it serves TLS instead (ALPN h2 and
// http/1.1) with a generated CA + server certificate. See README.md.
//
//   node kinesis-efo.js [--port N] [--host 127.0.0.1] [--upstream http://127.0.0.1:4567]
//
// Prints "Listening at http://HOST:PORT" (or https) once it accepts connections.
'use strict'

const fs = require('fs')
const path = require('path')
const net = require('net')
const http = require('http')
const https = require('https')
const http2 = require('http2')
const crypto = require('crypto')
const { execFileSync } = require('child_process')

// ---- settings ------------------------------------------------------------------------------------
const argv = process.argv.slice(2)
const args = {}
for (let i = 0; i < argv.length; i++) {
  const m = /^--([A-Za-z]+)(?:=(.*))?$/.exec(argv[i])
  if (!m) {
    console.error(`kinesis-efo.js: unexpected argument ${argv[i]}`)
    process.exit(2)
  }
  args[m[1]] = m[2] !== undefined ? m[2] : argv[++i]
}
const env = process.env
const num = (v, d) => (v === undefined || v === '' ? d : Number(v))
const S = {
  host: args.host || env.FLOE_EFO_HOST || '127.0.0.1',
  port: num(args.port || env.FLOE_EFO_PORT, 4568),
  tls: /^(1|true|yes)$/i.test(args.tls || env.FLOE_EFO_TLS || ''),
  tlsDir: args.tlsDir || env.FLOE_EFO_TLS_DIR || path.join(__dirname, '.tls'),
  upstream: args.upstream || env.FLOE_EFO_UPSTREAM || '', // empty: kinesalite in this process
  consumerCreateMs: num(env.FLOE_EFO_CONSUMER_CREATE_MS, 500),
  consumerDeleteMs: num(env.FLOE_EFO_CONSUMER_DELETE_MS, 500),
  maxConsumers: num(env.FLOE_EFO_MAX_CONSUMERS, 20),
  subscriptionMs: num(env.FLOE_EFO_SUBSCRIPTION_SECONDS, 300) * 1000,
  pushMs: num(env.FLOE_EFO_PUSH_MS, 250), // poll period when idle; an (empty) event per poll
  resubscribeCooldownMs: num(env.FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS, 5000), // as on AWS
  maxEventBytes: num(env.FLOE_EFO_MAX_EVENT_BYTES, 1024 * 1024),
  getRecordsLimit: num(env.FLOE_EFO_GET_RECORDS_LIMIT, 10000),
  pollingLimits: /^(1|true|yes)$/i.test(env.FLOE_EFO_POLLING_LIMITS || ''),
  verbose: /^(1|true|yes)$/i.test(env.FLOE_EFO_VERBOSE || ''),
  kinesalite: {
    shardLimit: num(env.FLOE_EFO_SHARD_LIMIT, 100),
    createStreamMs: num(env.FLOE_EFO_CREATE_STREAM_MS, 50),
    deleteStreamMs: num(env.FLOE_EFO_DELETE_STREAM_MS, 50),
    updateStreamMs: num(env.FLOE_EFO_UPDATE_STREAM_MS, 50),
  },
}
const log = (...a) => S.verbose && console.error(new Date().toISOString(), ...a)

function requireKinesalite(sub) {
  // Its own node_modules, or the kinesalite aws-emulators.sh installs under <repo>/.local/node.
  const places = [
    path.join(__dirname, 'node_modules'),
    path.join(__dirname, '..', '..', '..', '.local', 'node', 'node_modules'),
  ]
  for (const p of places) {
    try {
      return require(path.join(p, 'kinesalite', sub || ''))
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e
    }
  }
  throw new Error('kinesalite not found: npm install kinesalite@3.3.3 (or give --upstream URL)')
}

let upstream = null // {mod, agent, host, port, base}: where ordinary operations go
function setUpstream(url) {
  const u = new URL(url)
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`upstream ${url}: http:// or https:// expected`)
  const secure = u.protocol === 'https:'
  upstream = {
    url: u.origin + u.pathname.replace(/\/$/, ''),
    mod: secure ? https : http,
    agent: new (secure ? https : http).Agent({ keepAlive: true, maxSockets: 64 }),
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port: Number(u.port) || (secure ? 443 : 80),
    base: u.pathname.replace(/\/$/, ''),
  }
}

// ---- AWS event stream encoding -------------------------------------------------------------------
const CRC_TABLE = (() => {
  const t = new Int32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c
  }
  return t
})()
function crc32(buf) {
  let c = -1
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8)
  return (c ^ -1) >>> 0
}

// headers: [[name, stringValue], ...] (all of type 7, string); payload: Buffer
function encodeMessage(headers, payload) {
  const hparts = []
  for (const [name, value] of headers) {
    const n = Buffer.from(name, 'utf8')
    const v = Buffer.from(value, 'utf8')
    const h = Buffer.alloc(1 + n.length + 1 + 2 + v.length)
    h.writeUInt8(n.length, 0)
    n.copy(h, 1)
    h.writeUInt8(7, 1 + n.length)
    h.writeUInt16BE(v.length, 2 + n.length)
    v.copy(h, 4 + n.length)
    hparts.push(h)
  }
  const hbuf = Buffer.concat(hparts)
  const total = 12 + hbuf.length + payload.length + 4
  const msg = Buffer.alloc(total)
  msg.writeUInt32BE(total, 0)
  msg.writeUInt32BE(hbuf.length, 4)
  msg.writeUInt32BE(crc32(msg.subarray(0, 8)), 8)
  hbuf.copy(msg, 12)
  payload.copy(msg, 12 + hbuf.length)
  msg.writeUInt32BE(crc32(msg.subarray(0, total - 4)), total - 4)
  return msg
}
function eventMessage(eventType, obj) {
  return encodeMessage(
    [
      [':event-type', eventType],
      [':content-type', 'application/json'],
      [':message-type', 'event'],
    ],
    Buffer.from(JSON.stringify(obj), 'utf8'),
  )
}
function exceptionMessage(type, message) {
  return encodeMessage(
    [
      [':exception-type', type],
      [':content-type', 'application/json'],
      [':message-type', 'exception'],
    ],
    Buffer.from(JSON.stringify({ message }), 'utf8'),
  )
}

// ---- kinesalite (the upstream, or in process on an internal port) --------------------------------
const AMZ_JSON = 'application/x-amz-json-1.1'
const DUMMY_AUTH =
  'AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/kinesis/aws4_request, SignedHeaders=host, Signature=0'

function kRequest(headers, body, method, url) {
  return new Promise((resolve, reject) => {
    const u = upstream
    const req = u.mod.request(
      { host: u.host, port: u.port, method: method || 'POST', path: u.base + (url || '/'), headers, agent: u.agent },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }))
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

class AwsError extends Error {
  constructor(type, message, status) {
    super(message)
    this.type = type
    this.status = status || 400
  }
}

// Call a kinesalite operation; resolves with its JSON, rejects with an AwsError.
async function kcall(op, data) {
  const r = await kRequest(
    {
      'content-type': AMZ_JSON,
      'x-amz-target': `Kinesis_20131202.${op}`,
      authorization: DUMMY_AUTH,
      'x-amz-date': '20200101T000000Z',
    },
    Buffer.from(JSON.stringify(data)),
  )
  let json = {}
  try {
    json = r.body.length ? JSON.parse(r.body.toString('utf8')) : {}
  } catch (e) {
    throw new AwsError('InternalFailure', `kinesalite ${op}: unparsable response`, 500)
  }
  if (r.status !== 200) throw new AwsError(json.__type || 'InternalFailure', json.message || '', r.status)
  return json
}

// ---- helpers -------------------------------------------------------------------------------------
const NAME_RE = /^[a-zA-Z0-9_.-]{1,128}$/
// arn:aws:kinesis:REGION:ACCOUNT:stream/NAME
const STREAM_ARN_RE = /^arn:aws[a-z-]*:kinesis:([a-z0-9-]+):([0-9]{12}):stream\/([a-zA-Z0-9_.-]{1,128})$/
// ...:stream/NAME/consumer/CNAME:EPOCH
const CONSUMER_ARN_RE =
  /^(arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:stream\/([a-zA-Z0-9_.-]{1,128}))\/consumer\/([a-zA-Z0-9_.-]{1,128}):([0-9]+)$/

function streamNameOfArn(arn, member) {
  if (typeof arn !== 'string') throw new AwsError('ValidationException', `1 validation error detected: Value null at '${member}' failed to satisfy constraint: Member must not be null`)
  const m = STREAM_ARN_RE.exec(arn)
  if (!m) throw new AwsError('ValidationException', `1 validation error detected: Value '${arn}' at '${member}' failed to satisfy constraint: Member must satisfy regular expression pattern: arn:aws.*:kinesis:.*:\\d{12}:stream/\\S+`)
  return m[3]
}

const secs = (ms) => ms / 1000

// ---- consumers -----------------------------------------------------------------------------------
// consumers: ConsumerARN -> consumer; byStream: stream name -> Map(consumer name -> consumer)
const consumers = new Map()
const byStream = new Map()

function consumerView(c, withStream) {
  const v = {
    ConsumerName: c.name,
    ConsumerARN: c.arn,
    ConsumerStatus: c.status,
    ConsumerCreationTimestamp: secs(c.createdMs),
  }
  if (withStream) v.StreamARN = c.streamARN
  return v
}

function findConsumer(data, opName) {
  if (data.ConsumerARN != null) {
    const c = consumers.get(data.ConsumerARN)
    if (!c) throw new AwsError('ResourceNotFoundException', `Consumer ${data.ConsumerARN} not found.`)
    return c
  }
  if (data.StreamARN == null || data.ConsumerName == null) {
    throw new AwsError('InvalidArgumentException', `${opName}: either ConsumerARN or both StreamARN and ConsumerName must be given.`)
  }
  const name = streamNameOfArn(data.StreamARN, 'streamARN')
  const c = byStream.get(name) && byStream.get(name).get(data.ConsumerName)
  if (!c) throw new AwsError('ResourceNotFoundException', `Consumer ${data.ConsumerName} under stream ${data.StreamARN} not found.`)
  return c
}

// Also forgets the consumers of an earlier stream of this name: with an upstream, a DeleteStream
// (and a re-create) can go to the upstream directly, where this front does not see it.
async function streamSummary(name) {
  const r = await kcall('DescribeStreamSummary', { StreamName: name })
  const summary = r.StreamDescriptionSummary
  for (const c of [...(byStream.get(name) || new Map()).values()]) {
    if (c.streamCreated !== summary.StreamCreationTimestamp) {
      cutSubscriptions({ ConsumerARN: c.arn, Mode: 'close', Message: 'stream deleted' }, 'stream_deleted')
      dropConsumer(c)
    }
  }
  return summary
}

async function registerStreamConsumer(data) {
  const streamName = streamNameOfArn(data.StreamARN, 'streamARN')
  if (typeof data.ConsumerName !== 'string' || !NAME_RE.test(data.ConsumerName)) {
    throw new AwsError('ValidationException', `1 validation error detected: Value '${data.ConsumerName}' at 'consumerName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ and have length between 1 and 128`)
  }
  const summary = await streamSummary(streamName) // ResourceNotFoundException when missing
  if (summary.StreamStatus !== 'ACTIVE' && summary.StreamStatus !== 'UPDATING') {
    throw new AwsError('ResourceInUseException', `Stream ${data.StreamARN} is ${summary.StreamStatus}; it must be ACTIVE.`)
  }
  let m = byStream.get(streamName)
  if (!m) byStream.set(streamName, (m = new Map()))
  if (m.has(data.ConsumerName)) {
    throw new AwsError('ResourceInUseException', `Consumer ${data.ConsumerName} under stream ${data.StreamARN} already exists.`)
  }
  if (m.size >= S.maxConsumers) {
    throw new AwsError('LimitExceededException', `Stream ${data.StreamARN} already has ${m.size} registered consumers (limit ${S.maxConsumers}).`)
  }
  const createdMs = Date.now()
  const c = {
    name: data.ConsumerName,
    streamName,
    streamARN: data.StreamARN,
    arn: `${data.StreamARN}/consumer/${data.ConsumerName}:${Math.floor(createdMs / 1000)}`,
    status: 'CREATING',
    createdMs,
    streamCreated: summary.StreamCreationTimestamp,
    timer: null,
  }
  m.set(c.name, c)
  consumers.set(c.arn, c)
  c.timer = setTimeout(() => {
    if (c.status === 'CREATING') c.status = 'ACTIVE'
  }, S.consumerCreateMs)
  return { Consumer: consumerView(c, false) }
}

function dropConsumer(c) {
  clearTimeout(c.timer)
  consumers.delete(c.arn)
  for (const key of [...lastSubscribed.keys()]) if (key.startsWith(`${c.arn}|`)) lastSubscribed.delete(key)
  const m = byStream.get(c.streamName)
  if (m && m.get(c.name) === c) {
    m.delete(c.name)
    if (!m.size) byStream.delete(c.streamName)
  }
}

async function deregisterStreamConsumer(data) {
  const c = findConsumer(data, 'DeregisterStreamConsumer')
  if (c.status !== 'DELETING') {
    c.status = 'DELETING'
    clearTimeout(c.timer)
    cutSubscriptions({ ConsumerARN: c.arn, Mode: 'close', Message: 'consumer deregistered' }, 'deregistered')
    c.timer = setTimeout(() => dropConsumer(c), S.consumerDeleteMs)
  }
  return {}
}

async function describeStreamConsumer(data) {
  return { ConsumerDescription: consumerView(findConsumer(data, 'DescribeStreamConsumer'), true) }
}

async function listStreamConsumers(data) {
  let streamName
  let start = 0
  if (data.NextToken != null) {
    let tok
    try {
      tok = JSON.parse(Buffer.from(String(data.NextToken), 'base64').toString('utf8'))
    } catch (e) {
      tok = null
    }
    if (!tok || typeof tok.s !== 'string' || typeof tok.i !== 'number') {
      throw new AwsError('InvalidArgumentException', 'Invalid NextToken.')
    }
    if (Date.now() - tok.t > 300000) throw new AwsError('ExpiredNextTokenException', 'The NextToken has expired.')
    streamName = tok.s
    start = tok.i
  }
  const given = streamNameOfArn(data.StreamARN, 'streamARN')
  if (streamName !== undefined && streamName !== given) {
    throw new AwsError('InvalidArgumentException', 'NextToken is of another stream.')
  }
  streamName = given
  const max = data.MaxResults == null ? 100 : Number(data.MaxResults)
  if (!(max >= 1 && max <= 10000)) {
    throw new AwsError('ValidationException', `1 validation error detected: Value '${data.MaxResults}' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and 10000`)
  }
  await streamSummary(streamName)
  const all = [...(byStream.get(streamName) || new Map()).values()].sort((a, b) => a.createdMs - b.createdMs || (a.name < b.name ? -1 : 1))
  const page = all.slice(start, start + max)
  const out = { Consumers: page.map((c) => consumerView(c, false)) }
  if (start + max < all.length) {
    out.NextToken = Buffer.from(JSON.stringify({ s: streamName, i: start + max, t: Date.now() })).toString('base64')
  }
  return out
}

// ---- subscriptions -------------------------------------------------------------------------------
// key `${ConsumerARN}|${ShardId}` -> subscription
const subscriptions = new Map()
const lastSubscribed = new Map() // key -> ms of the last successful SubscribeToShard
const pending = new Set() // keys whose SubscribeToShard is taking its first iterator
let subSeq = 0

// kinesalite 3.3.3's iterator encoding (db/index.js, createShardIterator): 8 bytes 0…01, then
// AES-256-CBC under this fixed key and IV of "epoch ms/stream/shard/position/0…". Written out here
// (not taken from kinesalite's module) so that upstream mode needs no kinesalite in this process.
const KINESALITE_ITERATOR_KEY = Buffer.from('1133a5a833666b49abf28c8ba302930f0b2fb240dccd43cf4dfbc0ca91f17751', 'hex')
const KINESALITE_ITERATOR_IV = Buffer.from('7bf139dbabbea2d9995d6fcae1dff7da', 'hex')

// The position an iterator reads from (inclusive), from kinesalite's (known-key) iterator encoding.
function iteratorPosition(iterator) {
  const buf = Buffer.from(iterator, 'base64')
  const d = crypto.createDecipheriv('aes-256-cbc', KINESALITE_ITERATOR_KEY, KINESALITE_ITERATOR_IV)
  const pieces = Buffer.concat([d.update(buf.subarray(8)), d.final()]).toString('utf8').split('/')
  if (pieces.length < 5 || !/^\d+$/.test(pieces[3])) throw new Error('not a kinesalite 3.3.3 shard iterator')
  return pieces[3]
}

// A sequence number C with AFTER_SEQUENCE_NUMBER C == AT_SEQUENCE_NUMBER pos in kinesalite
// (kinesalite's "after" keeps the index and adds one second to the time field). kinesalite's
// positions are its version-2 sequence numbers, 47 hex digits: '2' | shard create secs (9) |
// shard index, last digit (1) | sequence index (16) | byte1 (2) | time secs (9) | shard index (8) |
// '2'. The same as kinesalite's stringifySequence({...parseSequence(pos), seqTime: seqTime - 1000})
// (which also zeroes byte1).
function predecessor(pos) {
  const hex = BigInt(pos).toString(16)
  if (hex.length !== 47 || hex[0] !== '2' || hex[46] !== '2') throw new Error(`not a kinesalite sequence number: ${pos}`)
  const t = parseInt(hex.slice(29, 38), 16) - 1
  return BigInt('0x' + hex.slice(0, 27) + '00' + t.toString(16).padStart(9, '0') + hex.slice(38)).toString()
}

async function childShardsOf(streamName, shardId) {
  const r = await kcall('ListShards', { StreamName: streamName })
  return (r.Shards || [])
    .filter((s) => s.ParentShardId === shardId || s.AdjacentParentShardId === shardId)
    .map((s) => ({
      ShardId: s.ShardId,
      ParentShards: [s.ParentShardId, s.AdjacentParentShardId].filter(Boolean),
      HashKeyRange: s.HashKeyRange,
    }))
}

function validateSubscribe(data) {
  if (typeof data.ConsumerARN !== 'string' || !CONSUMER_ARN_RE.test(data.ConsumerARN)) {
    throw new AwsError('ValidationException', `1 validation error detected: Value '${data.ConsumerARN}' at 'consumerARN' failed to satisfy constraint: Member must satisfy regular expression pattern: ^(arn):aws.*:kinesis:.*:\\d{12}:.*stream\\/[a-zA-Z0-9_.-]+\\/consumer\\/[a-zA-Z0-9_.-]+:[0-9]+`)
  }
  if (typeof data.ShardId !== 'string' || !NAME_RE.test(data.ShardId)) {
    throw new AwsError('ValidationException', `1 validation error detected: Value '${data.ShardId}' at 'shardId' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+`)
  }
  const sp = data.StartingPosition
  const types = ['AT_SEQUENCE_NUMBER', 'AFTER_SEQUENCE_NUMBER', 'TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP']
  if (!sp || typeof sp !== 'object' || !types.includes(sp.Type)) {
    throw new AwsError('ValidationException', `1 validation error detected: Value '${sp && sp.Type}' at 'startingPosition.type' failed to satisfy constraint: Member must satisfy enum value set: [${types.join(', ')}]`)
  }
  const needsSeq = sp.Type === 'AT_SEQUENCE_NUMBER' || sp.Type === 'AFTER_SEQUENCE_NUMBER'
  if (needsSeq && (typeof sp.SequenceNumber !== 'string' || !/^(0|[1-9]\d{0,128})$/.test(sp.SequenceNumber))) {
    throw new AwsError('InvalidArgumentException', `StartingPosition ${sp.Type} needs a SequenceNumber.`)
  }
  if (!needsSeq && sp.SequenceNumber != null) {
    throw new AwsError('InvalidArgumentException', `StartingPosition ${sp.Type} takes no SequenceNumber.`)
  }
  if (sp.Type === 'AT_TIMESTAMP' && typeof sp.Timestamp !== 'number') {
    throw new AwsError('InvalidArgumentException', 'StartingPosition AT_TIMESTAMP needs a Timestamp.')
  }
}

// ---- records of subscriptions and per-shard counters --------------------------------------------
// Every subscription since the process started (the last SUB_LOG_MAX), oldest first; the objects
// are updated in place while a subscription runs. GET /_floe/subscriptions.
const SUB_LOG_MAX = 10000
const subLog = []
// GET /_floe/stats: "<stream>/<shardId>" -> counters, for the polling path (GetRecords through the
// front) and for SubscribeToShard (the events this emulator wrote).
const stats = { GetRecords: new Map(), SubscribeToShard: new Map() }
function statOf(kind, streamName, shardId) {
  const key = `${streamName}/${shardId}`
  let st = stats[kind].get(key)
  if (!st) {
    st = kind === 'GetRecords' ? { Calls: 0, Throttled: 0, Records: 0, Bytes: 0 } : { Subscriptions: 0, Events: 0, Records: 0, Bytes: 0 }
    stats[kind].set(key, st)
  }
  return st
}
function statsView() {
  return { GetRecords: Object.fromEntries(stats.GetRecords), SubscribeToShard: Object.fromEntries(stats.SubscribeToShard) }
}

// Validates, takes the first iterator and only then answers 200 and starts the event stream.
async function subscribeToShard(data, req, res, requestId) {
  validateSubscribe(data)
  const c = consumers.get(data.ConsumerARN)
  if (!c) throw new AwsError('ResourceNotFoundException', `Consumer ${data.ConsumerARN} not found.`)
  if (c.status !== 'ACTIVE') {
    throw new AwsError('ResourceInUseException', `Consumer ${data.ConsumerARN} is ${c.status}; it must be ACTIVE.`)
  }
  const key = `${c.arn}|${data.ShardId}`
  // AWS: a call within 5 s of the previous successful one for this consumer and shard (open or
  // not) is refused; a later one takes over an open subscription, which fails with
  // ResourceInUseException.
  const last = lastSubscribed.get(key)
  if (S.resubscribeCooldownMs > 0 && last !== undefined && Date.now() - last < S.resubscribeCooldownMs) {
    throw new AwsError('ResourceInUseException', `Consumer ${c.arn} subscribed to shard ${data.ShardId} ${Date.now() - last} ms ago; a new SubscribeToShard is accepted ${S.resubscribeCooldownMs} ms after the previous successful one.`)
  }
  if (pending.has(key)) {
    throw new AwsError('ResourceInUseException', `Another SubscribeToShard for consumer ${c.arn} on shard ${data.ShardId} is in progress.`)
  }
  const sp = data.StartingPosition
  const gsi = { StreamName: c.streamName, ShardId: data.ShardId, ShardIteratorType: sp.Type }
  if (sp.SequenceNumber != null) gsi.StartingSequenceNumber = sp.SequenceNumber
  if (sp.Type === 'AT_TIMESTAMP') gsi.Timestamp = Math.min(sp.Timestamp, Date.now() / 1000)
  pending.add(key) // reserved while the iterator is taken (no await between the checks and here)
  let iterator
  try {
    iterator = (await kcall('GetShardIterator', gsi)).ShardIterator
  } finally {
    pending.delete(key)
  }
  if (consumers.get(c.arn) !== c || c.status !== 'ACTIVE') {
    throw new AwsError('ResourceInUseException', `Consumer ${data.ConsumerARN} is ${c.status}; it must be ACTIVE.`)
  }
  if (res.destroyed || res.writableEnded || (req.socket && req.socket.destroyed)) return
  lastSubscribed.set(key, Date.now())
  const old = subscriptions.get(key)
  if (old) {
    endSubscription(old, 'error', `The subscription of consumer ${c.arn} to shard ${data.ShardId} was taken over by a newer SubscribeToShard.`, 'ResourceInUseException', 'taken_over')
  }
  const rec = {
    ConsumerARN: c.arn,
    ShardId: data.ShardId,
    StreamName: c.streamName,
    StartedAt: Date.now(),
    EndedAt: null,
    EndReason: null,
    Events: 0,
    Records: 0,
    Bytes: 0,
  }
  subLog.push(rec)
  if (subLog.length > SUB_LOG_MAX) subLog.splice(0, subLog.length - SUB_LOG_MAX)
  const st = statOf('SubscribeToShard', c.streamName, data.ShardId)
  st.Subscriptions++
  const sub = {
    id: ++subSeq,
    key,
    consumer: c,
    shardId: data.ShardId,
    streamName: c.streamName,
    iterator,
    limit: Math.min(S.getRecordsLimit, 10), // the internal GetRecords' Limit, adapted to record sizes
    res,
    req,
    rec,
    st,
    done: false,
    needDrain: false, // the last write() returned false and 'drain' has not come yet
    wake: null, // resolves the pump's current wait (drain, idle period) early
    timer: null,
    deadline: null,
  }
  subscriptions.set(key, sub)
  log(`subscribe #${sub.id} ${key} ${sp.Type} ${sp.SequenceNumber || ''}`)
  res.writeHead(200, {
    'content-type': 'application/vnd.amazon.eventstream',
    'x-amzn-requestid': requestId,
  })
  if (res.flushHeaders) res.flushHeaders()
  res.on('close', () => finish(sub, 'client_gone', 'client gone'))
  res.on('drain', () => {
    sub.needDrain = false
    wakeUp(sub)
  })
  send(sub, eventMessage('initial-response', {}))
  sub.deadline = setTimeout(() => endSubscription(sub, 'close', 'subscription lifetime reached', null, 'expired'), S.subscriptionMs)
  pump(sub).catch((e) => {
    console.error(e.stack || e)
    endSubscription(sub, 'error', `internal error: ${e.message}`, 'InternalFailureException', 'error')
  })
}

function wakeUp(sub) {
  const w = sub.wake
  sub.wake = null
  if (w) w()
}

// reason: the EndReason of the subscription's record (see README.md)
function finish(sub, reason, why) {
  if (sub.done) return
  sub.done = true
  sub.rec.EndedAt = Date.now()
  sub.rec.EndReason = reason
  clearTimeout(sub.timer)
  clearTimeout(sub.deadline)
  if (subscriptions.get(sub.key) === sub) subscriptions.delete(sub.key)
  log(`subscription #${sub.id} ${sub.key} ended (${reason}): ${why}`)
  wakeUp(sub)
}

// mode: close (end the stream cleanly), error (an exception event, then end), reset (abort)
function endSubscription(sub, mode, why, errType, reason) {
  if (sub.done) return
  finish(sub, reason || 'error', `${mode}: ${why}`)
  const res = sub.res
  try {
    if (mode === 'reset') {
      if (res.stream) res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
      else if (sub.req.socket) sub.req.socket.destroy()
    } else {
      if (mode === 'error') send(sub, exceptionMessage(errType || 'InternalFailureException', why))
      res.end()
    }
  } catch (e) {
    log(`ending subscription #${sub.id}: ${e.message}`)
  }
}

// reason: 'cut' for the test hook; the emulator's own uses give theirs
function cutSubscriptions(data, reason) {
  let n = 0
  for (const sub of [...subscriptions.values()]) {
    if (!sub) continue
    if (data.ConsumerARN && sub.consumer.arn !== data.ConsumerARN) continue
    if (data.ShardId && sub.shardId !== data.ShardId) continue
    if (data.StreamName && sub.streamName !== data.StreamName) continue
    endSubscription(sub, data.Mode || 'close', data.Message || 'subscription cut by Floe_CutSubscriptions', data.ErrorType, reason || 'cut')
    n++
  }
  return { Cut: n }
}

// Writes one event-stream message; counts it. Returns write()'s answer (false: wait for 'drain').
function send(sub, msg, records) {
  if (sub.res.destroyed || sub.res.writableEnded) return false
  sub.rec.Bytes += msg.length
  sub.st.Bytes += msg.length
  if (records !== undefined) {
    sub.rec.Events++
    sub.rec.Records += records
    sub.st.Events++
    sub.st.Records += records
  }
  const ok = sub.res.write(msg)
  if (!ok) sub.needDrain = true
  return ok
}

// Resolves when the transport takes more (after 'drain'), or at once; also when the subscription ends.
async function writable(sub) {
  while (sub.needDrain && !sub.done) await new Promise((r) => (sub.wake = r))
}
function idle(sub, ms) {
  return new Promise((r) => {
    sub.wake = r
    sub.timer = setTimeout(() => wakeUp(sub), ms)
  })
}

// Splits records into events of at most maxEventBytes (roughly: the JSON of the records).
function chunkRecords(records) {
  const chunks = []
  let cur = []
  let size = 0
  for (const r of records) {
    const sz = (r.Data ? r.Data.length : 0) + (r.PartitionKey ? r.PartitionKey.length : 0) + 160
    if (cur.length && size + sz > S.maxEventBytes) {
      chunks.push(cur)
      cur = []
      size = 0
    }
    cur.push(r)
    size += sz
  }
  if (cur.length) chunks.push(cur)
  return chunks
}

// One subscription's loop: GetRecords, then its events one by one. Back-pressure: when write()
// returns false the loop waits for 'drain' before the next event and before the next GetRecords,
// so a client that stops reading (HTTP/2 flow control, TCP) stops it; nothing is read ahead. The
// internal GetRecords' Limit follows the record sizes seen (about one event's worth per call, at
// most FLOE_EFO_GET_RECORDS_LIMIT), so at most about one event of records is held here.
async function pump(sub) {
  for (;;) {
    await writable(sub)
    if (sub.done) return
    let r
    try {
      r = await kcall('GetRecords', { ShardIterator: sub.iterator, Limit: sub.limit })
    } catch (e) {
      if (e.type === 'ResourceNotFoundException') return endSubscription(sub, 'error', e.message, e.type, 'stream_deleted')
      return endSubscription(sub, 'error', `GetRecords: ${e.type}: ${e.message}`, 'InternalFailureException', 'error')
    }
    if (sub.done) return
    const records = (r.Records || []).map((x) => {
      const o = {
        SequenceNumber: x.SequenceNumber,
        ApproximateArrivalTimestamp: x.ApproximateArrivalTimestamp,
        Data: x.Data,
        PartitionKey: x.PartitionKey,
      }
      if (x.EncryptionType) o.EncryptionType = x.EncryptionType
      return o
    })
    if (records.length) {
      const avg = records.reduce((n, x) => n + (x.Data ? x.Data.length : 0) + 160, 0) / records.length
      sub.limit = Math.max(1, Math.min(S.getRecordsLimit, Math.floor(S.maxEventBytes / avg), sub.limit * 10))
    }
    const millis = r.MillisBehindLatest || 0
    const chunks = chunkRecords(records)
    const events = []
    const closed = r.NextShardIterator == null
    if (closed) {
      // the end of a closed shard: the last event carries ChildShards and no continuation
      let children = []
      try {
        children = await childShardsOf(sub.streamName, sub.shardId)
      } catch (e) {
        log(`ListShards: ${e.message}`)
      }
      const last = chunks.pop() || []
      for (const ch of chunks) events.push({ Records: ch, ContinuationSequenceNumber: ch[ch.length - 1].SequenceNumber, MillisBehindLatest: millis })
      events.push({ Records: last, MillisBehindLatest: 0, ChildShards: children })
    } else if (chunks.length) {
      for (const ch of chunks) events.push({ Records: ch, ContinuationSequenceNumber: ch[ch.length - 1].SequenceNumber, MillisBehindLatest: millis })
    } else {
      let cont
      try {
        cont = predecessor(iteratorPosition(r.NextShardIterator))
      } catch (e) {
        return endSubscription(sub, 'error', `cannot read iterator: ${e.message}`, 'InternalFailureException', 'error')
      }
      events.push({ Records: [], ContinuationSequenceNumber: cont, MillisBehindLatest: millis })
    }
    for (const ev of events) {
      await writable(sub)
      if (sub.done) return
      send(sub, eventMessage('SubscribeToShardEvent', ev), ev.Records.length)
    }
    if (closed) return endSubscription(sub, 'close', 'shard end reached', null, 'shard_end')
    sub.iterator = r.NextShardIterator
    if (!records.length) await idle(sub, S.pushMs)
  }
}

// ---- HTTP front ----------------------------------------------------------------------------------
const EFO_OPS = {
  RegisterStreamConsumer: registerStreamConsumer,
  DescribeStreamConsumer: describeStreamConsumer,
  DeregisterStreamConsumer: deregisterStreamConsumer,
  ListStreamConsumers: listStreamConsumers,
  Floe_CutSubscriptions: async (data) => cutSubscriptions(data, 'cut'),
  Floe_ListSubscriptions: async () => ({ Subscriptions: subLog }),
  Floe_Stats: async () => statsView(),
}
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'http2-settings', 'host', 'te'])

function sendJson(res, status, obj, requestId, extra) {
  const body = Buffer.from(JSON.stringify(obj), 'utf8')
  const h = {
    'content-type': AMZ_JSON,
    'content-length': body.length,
    'x-amzn-requestid': requestId,
    ...(extra || {}),
  }
  res.writeHead(status, h)
  res.end(body)
}
function sendError(res, e, requestId) {
  if (res.headersSent) {
    try {
      res.end()
    } catch (_) {}
    return
  }
  const status = e.status || 400
  sendJson(res, status, { __type: e.type, message: e.message }, requestId, { 'x-amzn-errortype': e.type })
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = []
    let size = 0
    req.on('data', (c) => {
      size += c.length
      if (size > 8 * 1024 * 1024) {
        reject(new AwsError('SerializationException', 'request too large', 413))
        req.destroy()
        return
      }
      chunks.push(c)
    })
    req.on('end', () => resolve(Buffer.concat(chunks)))
    req.on('error', reject)
  })
}

async function handle(req, res) {
  const requestId = crypto.randomUUID()
  let body
  try {
    body = await readBody(req)
  } catch (e) {
    return sendError(res, e instanceof AwsError ? e : new AwsError('InternalFailure', e.message, 500), requestId)
  }
  const url = req.url || '/'
  const target = String(req.headers['x-amz-target'] || '')
  const op = target.startsWith('Kinesis_20131202.') ? target.slice('Kinesis_20131202.'.length) : null
  const urlPath = url.split('?')[0]
  const isCut = req.method === 'POST' && urlPath === '/_floe/cut'
  log(`${req.httpVersion} ${req.method} ${url} ${target}`)
  try {
    if (req.method === 'GET' && urlPath === '/_floe/subscriptions') return sendJson(res, 200, { Subscriptions: subLog }, requestId)
    if (req.method === 'GET' && urlPath === '/_floe/stats') return sendJson(res, 200, statsView(), requestId)
    if (isCut || (op && (op in EFO_OPS || op === 'SubscribeToShard'))) {
      let data = {}
      if (body.length) {
        try {
          data = JSON.parse(body.toString('utf8'))
        } catch (e) {
          throw new AwsError('SerializationException', 'Start of structure or map found where not expected.')
        }
        if (typeof data !== 'object' || data === null) throw new AwsError('SerializationException', 'Expected a JSON object.')
      }
      if (isCut) return sendJson(res, 200, cutSubscriptions(data, 'cut'), requestId)
      if (op === 'SubscribeToShard') return await subscribeToShard(data, req, res, requestId)
      return sendJson(res, 200, await EFO_OPS[op](data), requestId)
    }
    return await forward(req, res, body, op, requestId)
  } catch (e) {
    if (!(e instanceof AwsError)) {
      console.error(e.stack || e)
      e = new AwsError('InternalFailure', e.message, 500)
    }
    return sendError(res, e, requestId)
  }
}

// ---- the polling path: which shard a GetRecords reads, counters, AWS's per-shard limits ---------
// iterator -> {stream, shard}, from the GetShardIterator and GetRecords responses this front passed
// on (insertion order; the oldest are forgotten beyond ITERATORS_MAX).
const ITERATORS_MAX = 100000
const iterators = new Map()
function rememberIterator(it, stream, shard) {
  if (typeof it !== 'string' || !stream || !shard) return
  iterators.delete(it)
  iterators.set(it, { stream, shard })
  if (iterators.size > ITERATORS_MAX) iterators.delete(iterators.keys().next().value)
}
// An iterator the front did not hand out (e.g. taken from the upstream directly): kinesalite's
// iterator names its stream and shard (epoch ms/stream/shard/position/…, see iteratorPosition).
function shardOfIterator(it) {
  const known = iterators.get(it)
  if (known) return known
  try {
    const buf = Buffer.from(it, 'base64')
    const d = crypto.createDecipheriv('aes-256-cbc', KINESALITE_ITERATOR_KEY, KINESALITE_ITERATOR_IV)
    const p = Buffer.concat([d.update(buf.subarray(8)), d.final()]).toString('utf8').split('/')
    if (p.length >= 5 && NAME_RE.test(p[1]) && NAME_RE.test(p[2])) return { stream: p[1], shard: p[2] }
  } catch (e) {
    /* not a kinesalite iterator: not counted */
  }
  return null
}

// AWS: per shard, 5 GetRecords calls per second and 2 MiB of record data per second, shared by
// every polling consumer (FLOE_EFO_POLLING_LIMITS=1). Sliding 1 s window over the accepted calls.
const LIMIT_CALLS = 5
const LIMIT_BYTES = 2 * 1024 * 1024
const WINDOW_MS = 1000
const limiters = new Map() // "<stream>/<shard>" -> [{t, bytes}] of accepted calls, oldest first
function limiterOf(where) {
  const key = `${where.stream}/${where.shard}`
  let l = limiters.get(key)
  if (!l) limiters.set(key, (l = []))
  const now = Date.now()
  while (l.length && now - l[0].t >= WINDOW_MS) l.shift()
  return l
}
const bytesOf = (l) => l.reduce((n, x) => n + x.bytes, 0)
function throughputExceeded(where) {
  return new AwsError('ProvisionedThroughputExceededException', `Rate exceeded for shard ${where.shard} in stream ${where.stream} under account 000000000000.`)
}
// The bytes of record data of a GetRecords answer (Data is base64).
function recordBytes(records) {
  let n = 0
  for (const r of records || []) if (typeof r.Data === 'string') n += Buffer.byteLength(r.Data, 'base64')
  return n
}

// Everything else goes to kinesalite (the upstream or the in-process one), byte for byte except
// that StreamARN is turned into StreamName (kinesalite 3.3.3 refuses StreamARN alone).
// GetShardIterator and GetRecords are watched on the way: which shard an iterator reads, the
// GetRecords counters and (FLOE_EFO_POLLING_LIMITS=1) AWS's per-shard limits.
async function forward(req, res, body, op, requestId) {
  const headers = {}
  for (const [k, v] of Object.entries(req.headers)) {
    if (k.startsWith(':') || HOP_HEADERS.has(k.toLowerCase())) continue
    headers[k] = v
  }
  const ct = String(req.headers['content-type'] || '').split(';')[0].trim()
  let data = null
  if (ct === AMZ_JSON && body.length) {
    try {
      data = JSON.parse(body.toString('utf8'))
      if (data && typeof data === 'object' && typeof data.StreamARN === 'string' && data.StreamName == null) {
        const m = STREAM_ARN_RE.exec(data.StreamARN)
        if (m) {
          data.StreamName = m[3]
          delete data.StreamARN
          body = Buffer.from(JSON.stringify(data))
        }
      }
    } catch (e) {
      /* kinesalite answers the SerializationException */
    }
  }
  let where = null // GetRecords: the shard it reads
  let stat = null
  let lim = null
  if (op === 'GetRecords' && data && typeof data.ShardIterator === 'string') {
    where = shardOfIterator(data.ShardIterator)
    if (where) {
      stat = statOf('GetRecords', where.stream, where.shard)
      stat.Calls++
      if (S.pollingLimits) {
        lim = limiterOf(where)
        if (lim.length >= LIMIT_CALLS || bytesOf(lim) > LIMIT_BYTES) {
          stat.Throttled++
          throw throughputExceeded(where)
        }
      }
    }
  }
  headers['content-length'] = String(body.length)
  const r = await kRequest(headers, body, req.method, req.url)
  if (r.status === 200 && (op === 'GetRecords' || op === 'GetShardIterator') && data) {
    let out = null
    try {
      out = JSON.parse(r.body.toString('utf8'))
    } catch (e) {
      /* passed on as it is */
    }
    if (out && op === 'GetShardIterator') rememberIterator(out.ShardIterator, data.StreamName, data.ShardId)
    if (out && op === 'GetRecords' && stat) {
      const n = (out.Records || []).length
      const bytes = recordBytes(out.Records)
      if (lim) {
        lim = limiterOf(where) // the window moved while kinesalite answered
        const used = bytesOf(lim)
        if (lim.length >= LIMIT_CALLS || used > LIMIT_BYTES || (used > 0 && used + bytes > LIMIT_BYTES)) {
          // this call would exceed the budget: refused, its records are not passed on (kinesalite's
          // iterators hold no state, so the caller retries with the same one)
          stat.Throttled++
          throw throughputExceeded(where)
        }
        lim.push({ t: Date.now(), bytes })
      }
      stat.Records += n
      stat.Bytes += bytes
      if (out.NextShardIterator) rememberIterator(out.NextShardIterator, where.stream, where.shard)
    }
  }
  if (op === 'DeleteStream' && r.status === 200) {
    // AWS deletes a stream's consumers with it
    try {
      const name = JSON.parse(body.toString('utf8')).StreamName
      for (const c of [...(byStream.get(name) || new Map()).values()]) {
        cutSubscriptions({ ConsumerARN: c.arn, Mode: 'close', Message: 'stream deleted' }, 'stream_deleted')
        dropConsumer(c)
      }
    } catch (e) {
      /* ignore */
    }
  }
  const out = {}
  for (const [k, v] of Object.entries(r.headers)) {
    if (HOP_HEADERS.has(k) || k === 'date' || k === 'content-length') continue
    out[k] = v
  }
  out['content-length'] = r.body.length
  res.writeHead(r.status, out)
  res.end(r.body)
}

// ---- start ---------------------------------------------------------------------------------------
function listenInternal(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      server.removeListener('error', reject)
      resolve(server.address().port)
    })
  })
}

function ensureTls(dir) {
  fs.mkdirSync(dir, { recursive: true })
  const f = (n) => path.join(dir, n)
  if (!fs.existsSync(f('server.pem')) || !fs.existsSync(f('server.key')) || !fs.existsSync(f('ca.pem'))) {
    const run = (...a) => execFileSync('openssl', a, { stdio: ['ignore', 'ignore', 'pipe'] })
    run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '3650', '-subj', '/CN=floe kinesis-efo test CA',
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign')
    run('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=localhost')
    fs.writeFileSync(f('server.ext'), [
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      '',
    ].join('\n'))
    run('x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-out', f('server.pem'), '-days', '825', '-extfile', f('server.ext'))
  }
  return { key: fs.readFileSync(f('server.key')), cert: fs.readFileSync(f('server.pem')), caPath: f('ca.pem') }
}

async function main() {
  let k = null // the in-process kinesalite, when there is no upstream
  if (S.upstream) {
    setUpstream(S.upstream)
  } else {
    k = requireKinesalite()(S.kinesalite)
    setUpstream(`http://127.0.0.1:${await listenInternal(k)}`)
  }
  const onErr = (e) => log(`connection error: ${e.message}`)
  let front
  const h2opts = { settings: { maxConcurrentStreams: 1000, initialWindowSize: 1 << 20 } }
  if (S.tls) {
    const t = ensureTls(S.tlsDir)
    front = http2.createSecureServer({ ...h2opts, key: t.key, cert: t.cert, allowHTTP1: true }, handle)
    front.on('tlsClientError', onErr)
    console.log(`TLS CA certificate: ${t.caPath}`)
  } else {
    const h1 = http.createServer({ keepAliveTimeout: 60000 }, handle)
    const h2 = http2.createServer(h2opts, handle)
    h2.on('sessionError', onErr)
    h1.on('clientError', (e, s) => s.destroy())
    const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')
    front = net.createServer((socket) => {
      socket.on('error', onErr)
      let buf = Buffer.alloc(0)
      const onData = (d) => {
        buf = Buffer.concat([buf, d])
        const n = Math.min(buf.length, PREFACE.length)
        const isH2 = buf.subarray(0, n).equals(PREFACE.subarray(0, n))
        if (isH2 && n < PREFACE.length) return // need more bytes to decide
        socket.removeListener('data', onData)
        socket.pause()
        socket.unshift(buf)
        // http2 takes the bytes already read from socket.readableLength; http/1.1 wants flowing data
        if (isH2) h2.emit('connection', socket)
        else {
          h1.emit('connection', socket)
          socket.resume()
        }
      }
      socket.on('data', onData)
    })
  }
  front.on('error', (e) => {
    console.error(`kinesis-efo.js: ${e.message}`)
    process.exit(1)
  })
  front.listen(S.port, S.host, () => {
    const a = front.address()
    const behind = (k ? `kinesalite on ${upstream.host}:${upstream.port}` : `upstream ${upstream.url}`) + (S.pollingLimits ? '; polling limits on' : '')
    console.log(`Listening at ${S.tls ? 'https' : 'http'}://${a.address}:${a.port} (${behind})`)
  })
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      for (const sub of [...subscriptions.values()]) if (sub) endSubscription(sub, 'close', 'shutdown', null, 'error')
      front.close()
      if (k) k.close(() => process.exit(0))
      else setTimeout(() => process.exit(0), 100) // lets the ends of open subscriptions go out
      setTimeout(() => process.exit(0), 500).unref()
    })
  }
}

main().catch((e) => {
  console.error(e.stack || e)
  process.exit(1)
})
