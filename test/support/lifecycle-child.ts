/**
 * Child-process side of test/lifecycle.test.ts: `node lifecycle-child.js MODE ARGS...`.
 * Everything it learns is printed as one JSON object per line on stdout.
 *
 * Modes:
 *  - throw-handled NETNS IFB: a linkAdded listener throws; an uncaughtException handler records
 *    the error, closes the monitor and lets the process end by itself.
 *  - throw-unhandled NETNS IFB: the same without a handler.
 *  - keepalive NETNS unref|ref|unref-ref: opens a monitor, waits for ready, applies the mode.
 *  - writes NETNS DEVICE: tries every write (expected to fail without CAP_NET_ADMIN) and reads.
 *  - enter NETNS: tries to open monitors and controls in NETNS (expected to fail without
 *    CAP_SYS_ADMIN).
 */
import { execFileSync } from 'node:child_process';

import { binding } from '../../lib/core/binding';
import { LinkMonitor } from '../../lib/core/monitor';
import { getFeatures, getLinks, setFeatures, setLinkMac } from '../../lib/core/oneshot';

export interface ErrorReport {
  name: string;
  message: string;
  code?: unknown;
  errno?: unknown;
  syscall?: unknown;
  interface?: unknown;
  netns?: unknown;
  capability?: unknown;
}

export function reportError(error: unknown): ErrorReport {
  if (!(error instanceof Error)) return { name: 'non-error', message: String(error) };
  const fields = error as Error & Record<string, unknown>;
  const report: ErrorReport = { name: error.name, message: error.message };
  for (const key of ['code', 'errno', 'syscall', 'interface', 'netns', 'capability'] as const) {
    if (key in fields) report[key] = fields[key];
  }
  return report;
}

function print(value: object): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

async function attempt(what: string, operation: () => unknown): Promise<void> {
  try {
    const value: unknown = await operation();
    print({ what, ok: true, value: value ?? null });
  } catch (error) {
    print({ what, ok: false, error: reportError(error) });
  }
}

async function throwing(netns: string, ifb: string, handled: boolean): Promise<void> {
  const thrown = new Error('boom');
  const monitor = new LinkMonitor({ netns });
  let closes = 0;
  monitor.on('close', () => {
    closes += 1;
    print({ what: 'close', closes });
  });
  if (handled) {
    let calls = 0;
    process.on('uncaughtException', (error) => {
      calls += 1;
      print({ what: 'uncaught', calls, same: error === thrown, message: error.message });
      monitor.close();
    });
  }
  monitor.on('linkAdded', (event) => {
    if (event.link.name === ifb) throw thrown;
  });
  await monitor.ready();
  print({ what: 'ready' });
  execFileSync('ip', ['-n', netns, 'link', 'add', ifb, 'type', 'ifb']);
}

async function keepalive(netns: string, mode: string): Promise<void> {
  const monitor = await LinkMonitor.open({ netns });
  if (mode === 'unref' || mode === 'unref-ref') monitor.unref();
  if (mode === 'unref-ref') monitor.ref();
  print({ what: 'ready', mode });
}

async function writes(netns: string, device: string): Promise<void> {
  await attempt('setLinkMac', () => setLinkMac(device, '02:00:00:00:77:01', { netns }));
  await attempt('setFeatures', () =>
    setFeatures(device, { 'tx-checksum-ip-generic': false }, { netns }),
  );
  await attempt('probeWriteAccess', () => {
    const control = new binding.Control({ netns: `/run/netns/${netns}`, netnsLabel: netns });
    try {
      control.probeWriteAccess();
    } finally {
      control.close();
    }
  });
  await attempt('getLinks', async () => (await getLinks({ netns })).map((link) => link.name));
  await attempt('getFeatures', async () => {
    const table = await getFeatures(device, { netns });
    return table.features.find((feature) => feature.name === 'tx-checksum-ip-generic') ?? null;
  });
}

async function enter(netns: string): Promise<void> {
  await attempt('getLinks', () => getLinks({ netns }));
  await attempt('LinkMonitor', () => {
    new LinkMonitor({ netns }).close();
  });
  await attempt('LinkMonitor.open', async () => {
    (await LinkMonitor.open({ netns })).close();
  });
  await attempt('own namespace', async () => (await getLinks()).length > 0);
}

async function main(argv: string[]): Promise<void> {
  const [mode, netns, extra] = argv;
  if (netns === undefined) throw new Error('usage: lifecycle-child MODE NETNS [ARG]');
  switch (mode) {
    case 'throw-handled':
      return throwing(netns, extra ?? 'ifbx', true);
    case 'throw-unhandled':
      return throwing(netns, extra ?? 'ifbx', false);
    case 'keepalive':
      return keepalive(netns, extra ?? 'ref');
    case 'writes':
      return writes(netns, extra ?? 'vx0');
    case 'enter':
      return enter(netns);
    default:
      throw new Error(`unknown mode ${String(mode)}`);
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`lifecycle-child: ${String(error)}\n`);
    process.exitCode = 3;
  });
}
