#!/usr/bin/env node
// kinesalite 3.3.3 (installed by deploy/local/aws-emulators.sh into .local/node) on a chosen host.
// Its own cli.js always listens on every interface; this listens where we say.
//   NODE_PATH=.local/node/node_modules node deploy/local/kinesalite.js --host 127.0.0.1 --port 4567 \
//     --shardLimit 100 --createStreamMs 50 --deleteStreamMs 50 --updateStreamMs 50
// In memory (no --path). Prints "Listening at http://HOST:PORT" once it accepts connections.
'use strict'

const opts = {}
const argv = process.argv.slice(2)
for (let i = 0; i < argv.length; i++) {
  const m = /^--([A-Za-z]+)(?:=(.*))?$/.exec(argv[i])
  if (!m) {
    console.error(`kinesalite.js: unexpected argument ${argv[i]}`)
    process.exit(2)
  }
  opts[m[1]] = m[2] !== undefined ? m[2] : argv[++i]
}
for (const k of ['port', 'shardLimit', 'createStreamMs', 'deleteStreamMs', 'updateStreamMs']) {
  if (opts[k] !== undefined) opts[k] = Number(opts[k])
}
const host = opts.host || '127.0.0.1'
const port = opts.port || 4567
delete opts.host
delete opts.port

const server = require('kinesalite')(opts)
server.on('error', (e) => {
  console.error(`kinesalite.js: ${e.message}`)
  process.exit(1)
})
server.listen(port, host, () => {
  const a = server.address()
  console.log(`Listening at http://${a.address}:${a.port}`)
})
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    server.close(() => process.exit(0))
    setTimeout(() => process.exit(0), 500).unref() // keep-alive connections would hold close() open
  })
}
