#!/usr/bin/env node
// A third-party Nostr relay (the @nostr-relay packages over SQLite) for the
// archiver's interop test. It adds nothing to the relay's behaviour: this
// file only wires the packages to a WebSocket server, the way their README
// does.
//
// Usage: node server.js [--port N] [--db PATH] [--trace]
//   --port  (env NOSTR_RELAY_PORT, default 0): 0 picks a free port
//   --db    (env NOSTR_RELAY_DB, default ":memory:"): the SQLite file
//   --trace (env NOSTR_RELAY_TRACE=1): log every frame in and out to stderr
//   --exit-on-stdin-eof: exit when stdin closes, so a parent that dies
//           without killing the relay (a crashed test) does not leak it
//
// The first line on stdout is "LISTENING <port>"; logs go to stderr. The
// relay exits on SIGTERM and SIGINT.
'use strict';

const { NostrRelay } = require('@nostr-relay/core');
const { EventRepositorySqlite } = require('@nostr-relay/event-repository-sqlite');
const { Validator } = require('@nostr-relay/validator');
const { WebSocketServer } = require('ws');

function parseArgs(argv) {
  const out = {
    port: process.env.NOSTR_RELAY_PORT || '0',
    db: process.env.NOSTR_RELAY_DB || ':memory:',
    trace: process.env.NOSTR_RELAY_TRACE === '1',
    exitOnStdinEOF: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = () => (inline !== undefined ? inline : argv[++i]);
    switch (flag) {
      case '--port': out.port = value(); break;
      case '--db': out.db = value(); break;
      case '--trace': out.trace = true; break;
      case '--exit-on-stdin-eof': out.exitOnStdinEOF = true; break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  const port = Number(out.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`bad port ${out.port}`);
  }
  return { ...out, port };
}

// The packages' default logger writes to stdout, which carries LISTENING.
const stderrLogger = {
  level: 1,
  setLogLevel(level) { this.level = level; },
  debug(...a) { if (this.level <= 0) console.error('debug', ...a); },
  info(...a) { if (this.level <= 1) console.error('info', ...a); },
  warn(...a) { if (this.level <= 2) console.error('warn', ...a); },
  error(...a) { console.error('error', ...a); },
};

function short(data) {
  const s = String(data);
  return s.length > 200 ? `${s.slice(0, 200)}... (${s.length} bytes)` : s;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const repo = new EventRepositorySqlite(opts.db);
  await repo.init();
  const relay = new NostrRelay(repo, { logger: stderrLogger });
  const validator = new Validator();

  // ws answers plain HTTP (e.g. a NIP-11 request) with 426.
  const wss = new WebSocketServer({ host: '127.0.0.1', port: opts.port });
  wss.on('connection', (ws, req) => {
    relay.handleConnection(ws, req.socket.remoteAddress);
    if (opts.trace) {
      const send = ws.send.bind(ws);
      ws.send = (data, ...rest) => { console.error('out', short(data)); return send(data, ...rest); };
    }
    ws.on('message', async (data) => {
      if (opts.trace) console.error('in', short(data));
      try {
        const msg = await validator.validateIncomingMessage(data);
        await relay.handleMessage(ws, msg);
      } catch (err) {
        ws.send(JSON.stringify(['NOTICE', err instanceof Error ? err.message : String(err)]));
      }
    });
    ws.on('close', () => relay.handleDisconnect(ws));
    ws.on('error', (err) => stderrLogger.warn('connection error', err.message));
  });
  await new Promise((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  process.stdout.write(`LISTENING ${wss.address().port}\n`);

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    for (const ws of wss.clients) ws.terminate();
    await new Promise((resolve) => wss.close(resolve));
    await relay.destroy();
    await repo.destroy();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (opts.exitOnStdinEOF) {
    process.stdin.on('end', stop);
    process.stdin.on('error', stop);
    process.stdin.resume();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
