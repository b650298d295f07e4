/**
 * Bounded pod-to-pod traffic probes that need no extra packages: ICMP echo (iputils `ping` if
 * installed, otherwise a raw-socket python3 probe), and TCP/UDP echo through a small Node agent.
 */
import { existsSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { terminate, waitForExit, type Netns } from './netns';

/** Port the echo agent listens on (TCP and UDP). */
export const ECHO_PORT = 7777;

const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const PING = ['/usr/bin/ping', '/bin/ping'].find((p) => existsSync(p));

/** Raw ICMP echo: argv: dst deadline_ms. Exit 0 on the first matching reply, 1 on deadline. */
const PY_PING = String.raw`
import os, select, socket, struct, sys, time
dst = sys.argv[1]; deadline = time.monotonic() + int(sys.argv[2]) / 1000.0
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident = os.getpid() & 0xffff; seq = 0; next_send = 0.0
while True:
    now = time.monotonic()
    if now >= deadline: sys.exit(1)
    if now >= next_send:
        seq = (seq + 1) & 0xffff
        hdr = struct.pack('!BBHHH', 8, 0, 0, ident, seq) + b'flannel-guard-ping'
        pkt = hdr[:2] + struct.pack('!H', csum(hdr)) + hdr[4:]
        try: s.sendto(pkt, (dst, 0))
        except OSError: pass
        next_send = now + 0.2
    r, _, _ = select.select([s], [], [], max(0.0, min(next_send, deadline) - time.monotonic()))
    if not r: continue
    data, addr = s.recvfrom(65535)
    ihl = (data[0] & 0x0f) * 4
    if addr[0] == dst and len(data) >= ihl + 8:
        t, c, _, i, q = struct.unpack('!BBHHH', data[ihl:ihl + 8])
        if t == 0 and i == ident: sys.exit(0)
`;

/** Echo agent: TCP + UDP echo on ECHO_PORT; prints READY; exits when stdin closes or after 10 min. */
const AGENT = String.raw`
const net = require('node:net'), dgram = require('node:dgram');
const port = Number(process.argv[1]);
const tcp = net.createServer((s) => { s.on('error', () => {}); s.pipe(s); });
const udp = dgram.createSocket('udp4');
udp.on('message', (m, r) => udp.send(m, r.port, r.address));
let ready = 0;
const up = () => { if (++ready === 2) process.stdout.write('READY\n'); };
tcp.listen(port, '0.0.0.0', up);
udp.bind(port, '0.0.0.0', up);
process.stdin.on('end', () => process.exit(0)); process.stdin.resume();
setTimeout(() => process.exit(0), 600000).unref();
`;

/** TCP client: argv host port bytes timeoutMs. Exit 0 iff the echoed bytes match. */
const TCP_CLIENT = String.raw`
const net = require('node:net');
const [host, port, bytes, timeout] = process.argv.slice(1);
const n = Number(bytes);
const payload = Buffer.alloc(n, 0); for (let i = 0; i < n; i++) payload[i] = (i * 7 + 3) & 0xff;
setTimeout(() => process.exit(1), Number(timeout));
const chunks = []; let got = 0;
const s = net.connect({ host, port: Number(port) }, () => s.write(payload));
s.on('data', (d) => { chunks.push(d); got += d.length;
  if (got >= n) { process.exit(Buffer.concat(chunks).subarray(0, n).equals(payload) ? 0 : 2); } });
s.on('error', () => process.exit(1));
`;

/** UDP client: argv host port timeoutMs. Exit 0 on the first echoed datagram. */
const UDP_CLIENT = String.raw`
const dgram = require('node:dgram');
const [host, port, timeout] = process.argv.slice(1);
const msg = Buffer.from('flannel-guard-udp-' + process.pid);
const s = dgram.createSocket('udp4');
s.on('message', (m) => { if (m.equals(msg)) process.exit(0); });
s.on('error', () => {});
const send = () => s.send(msg, Number(port), host, () => {});
send(); setInterval(send, 200);
setTimeout(() => process.exit(1), Number(timeout));
`;

/** ICMP echo from `ns` to `dst`; true on a reply within `timeoutMs`. */
export async function pingFrom(ns: Netns, dst: string, timeoutMs = 2000): Promise<boolean> {
  const argv =
    PING !== undefined
      ? [
          PING,
          '-n',
          '-q',
          '-c',
          '1',
          '-i',
          '0.2',
          '-w',
          String(Math.max(1, Math.ceil(timeoutMs / 1000))),
          dst,
        ]
      : [PYTHON, '-c', PY_PING, dst, String(timeoutMs)];
  const r = await ns.run(argv, {
    allowFailure: true,
    timeoutMs: timeoutMs + 3000,
  });
  return r.code === 0;
}

/** A running echo agent (TCP+UDP) in a netns. */
export class EchoAgent {
  private constructor(
    readonly ns: Netns,
    readonly port: number,
    private readonly child: ChildProcess,
  ) {}

  /** Start the agent and wait (bounded) until both sockets listen. */
  static async start(ns: Netns, port = ECHO_PORT, timeoutMs = 5000): Promise<EchoAgent> {
    const child = ns.spawn([process.execPath, '-e', AGENT, String(port)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const agent = new EchoAgent(ns, port, child);
    let out = '';
    let err = '';
    child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    try {
      await new Promise<void>((resolve, reject) => {
        const done = (e?: Error): void => {
          clearTimeout(timer);
          child.removeListener('exit', onExit);
          child.stdout?.removeListener('data', onData);
          if (e === undefined) resolve();
          else reject(e);
        };
        const onData = (d: Buffer): void => {
          out += d.toString();
          if (out.includes('READY')) done();
        };
        const onExit = (code: number | null): void =>
          done(new Error(`echo agent exited (${String(code)}): ${err}`));
        const timer = setTimeout(
          () => done(new Error(`echo agent not ready after ${timeoutMs} ms`)),
          timeoutMs,
        );
        child.stdout?.on('data', onData);
        child.once('exit', onExit);
      });
    } catch (e) {
      await agent.stop();
      throw e;
    }
    return agent;
  }

  /** Stop the agent (closes its stdin, then SIGTERM/SIGKILL; bounded). */
  async stop(): Promise<void> {
    this.child.stdin?.end();
    if (!(await waitForExit(this.child, 500))) await terminate(this.child, 1000);
  }
}

/** TCP round trip of `bytes` bytes from `ns` to an echo agent at `dst`; true if echoed intact. */
export async function tcpEchoFrom(
  ns: Netns,
  dst: string,
  opts: { port?: number; bytes?: number; timeoutMs?: number } = {},
): Promise<boolean> {
  // Includes starting a Node client inside the pod, which takes a while on a busy machine.
  const timeoutMs = opts.timeoutMs ?? 5000;
  const r = await ns.run(
    [
      process.execPath,
      '-e',
      TCP_CLIENT,
      dst,
      String(opts.port ?? ECHO_PORT),
      String(opts.bytes ?? 1000),
      String(timeoutMs),
    ],
    { allowFailure: true, timeoutMs: timeoutMs + 3000 },
  );
  return r.code === 0;
}

/** UDP datagram echo from `ns` to an echo agent at `dst`; true on an echo within the timeout. */
export async function udpEchoFrom(
  ns: Netns,
  dst: string,
  opts: { port?: number; timeoutMs?: number } = {},
): Promise<boolean> {
  // Includes starting a Node client inside the pod, which takes a while on a busy machine.
  const timeoutMs = opts.timeoutMs ?? 5000;
  const r = await ns.run(
    [process.execPath, '-e', UDP_CLIENT, dst, String(opts.port ?? ECHO_PORT), String(timeoutMs)],
    { allowFailure: true, timeoutMs: timeoutMs + 3000 },
  );
  return r.code === 0;
}
