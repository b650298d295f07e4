#!/usr/bin/env node
/**
 * flannel-guard command line: `watch` runs the guard until SIGINT/SIGTERM;
 * `status` prints the managed devices once. Exit status: 0 success, 1 a
 * failure while running, 2 a bad flag or value, 77 missing privileges.
 */
import type { EventEmitter } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Command, CommanderError, Option } from 'commander';

import { isSystemError } from './errors';
import {
  DEFAULT_INTERFACES,
  DEFAULT_OFFLOAD,
  FlannelGuard,
  type FlannelGuardEvents,
  type FlannelGuardOptions,
} from './guard';
import { DEFAULT_FIGHT_POLICY } from './fight';
import { openControl } from './oneshot';
import { explicitMacSource } from './sources';
import { compileInterfaceGlob, resolveNetnsPath } from './validate';
import { readStatus, type StatusReport } from './status';

const EXIT_USAGE = 2;
const EXIT_NOPERM = 77;

/** A flag or value that is wrong: printed as one line, exit status 2. */
class UsageError extends Error {}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

interface CommonFlags {
  iface?: string[];
  mac?: string[];
  offload?: string[];
  netns?: string;
  json?: boolean;
}

interface WatchFlags extends CommonFlags {
  pin: 'first-seen' | 'none';
  dryRun?: boolean;
  receiveBuffer?: string;
  maxRewrites: string;
  rewriteWindow: string;
  quietPeriod: string;
  kernelFilter: boolean;
}

function positiveInteger(flag: string, value: string): number {
  const number = Number(value);
  if (!Number.isInteger(number) || number <= 0) {
    throw new UsageError(`${flag} ${value}: expected a positive whole number`);
  }
  return number;
}

function parseMacFlags(values: string[] | undefined): Record<string, string> | undefined {
  if (!values) return undefined;
  const macs: Record<string, string> = {};
  for (const value of values) {
    const separator = value.indexOf('=');
    if (separator <= 0) throw new UsageError(`--mac ${value}: expected IFACE=MAC`);
    macs[value.slice(0, separator)] = value.slice(separator + 1);
  }
  // Validates names and MACs the same way the guard will.
  explicitMacSource(macs);
  return macs;
}

function parseOffloadFlags(
  values: string[] | undefined,
  knownFeatures: () => Set<string>,
): Record<string, boolean> | 'none' {
  if (!values) return { ...DEFAULT_OFFLOAD };
  if (values.includes('none')) {
    if (values.length > 1) throw new UsageError('--offload none cannot be combined with features');
    return 'none';
  }
  const policy: Record<string, boolean> = {};
  const known = knownFeatures();
  for (const value of values) {
    const match = /^([a-z0-9-]+)=(on|off)$/.exec(value);
    if (!match?.[1] || !match[2])
      throw new UsageError(`--offload ${value}: expected FEATURE=on|off or none`);
    if (!known.has(match[1])) {
      throw new UsageError(`--offload ${value}: unknown feature ${match[1]} (see ethtool -k)`);
    }
    policy[match[1]] = match[2] === 'on';
  }
  return policy;
}

function checkNetns(netns: string | undefined): void {
  if (netns === undefined) return;
  const path = resolveNetnsPath(netns);
  if (!existsSync(path))
    throw new UsageError(`--netns ${netns}: no such network namespace (${path})`);
}

/** Every feature name the kernel knows: the string set is the same for every device, lo included. */
function kernelFeatureNames(netns: string | undefined): Set<string> {
  const control = openControl(netns);
  try {
    return new Set(control.getFeatures('lo').features.map((feature) => feature.name));
  } finally {
    control.close();
  }
}

function commonOptions(
  flags: CommonFlags,
): Pick<FlannelGuardOptions, 'netns' | 'interfaces' | 'mac' | 'offload'> {
  checkNetns(flags.netns);
  const interfaces = flags.iface ?? [...DEFAULT_INTERFACES];
  for (const glob of interfaces) compileInterfaceGlob(glob);
  const options: Pick<FlannelGuardOptions, 'netns' | 'interfaces' | 'mac' | 'offload'> = {
    interfaces,
    offload: parseOffloadFlags(flags.offload, () => kernelFeatureNames(flags.netns)),
  };
  const mac = parseMacFlags(flags.mac);
  if (mac) options.mac = mac;
  if (flags.netns !== undefined) options.netns = flags.netns;
  return options;
}

// --- output -------------------------------------------------------------------

export type GuardEventName = Exclude<keyof FlannelGuardEvents, 'close'>;

function jsonLine(event: string, payload: object): string {
  const body = payload instanceof Error ? errorFields(payload) : payload;
  return JSON.stringify({ event, time: new Date().toISOString(), ...body });
}

function errorFields(error: Error): object {
  return { message: error.message, ...Object.fromEntries(Object.entries(error)) };
}

function onOff(value: boolean | null | undefined): string {
  return value === null || value === undefined ? '?' : value ? 'on' : 'off';
}

const describers: { [Name in GuardEventName]: (payload: FlannelGuardEvents[Name][0]) => string } = {
  ready: (ready) => {
    const devices = ready.devices.map(
      (d) =>
        `${d.name} (ifindex ${d.ifindex}) mac ${d.mac ?? 'none'}` +
        (d.desiredMac ? ` desired ${d.desiredMac} [${d.macSource}]` : ' [not pinned]') +
        Object.entries(d.offloads)
          .map(([name, active]) => ` ${name}=${onOff(active)}`)
          .join(''),
    );
    const list = devices.length === 0 ? 'no managed device yet' : devices.join('; ');
    return `ready${ready.dryRun ? ' (dry run)' : ''}: ${list}`;
  },
  rewrite: (e) =>
    `rewrite: ${e.device} ${e.previous ?? 'none'} -> ${e.mac ?? 'none'} (expected ${e.expected})${e.dryRun ? ' [dry run: not corrected]' : ''}: ${e.detail}`,
  adopted: (e) =>
    `adopted: ${e.device} keeps ${e.mac} (was published as ${e.previous}); ${e.neighbours} neighbour entries restored in ${e.latencyMs.toFixed(3)} ms`,
  restored: (e) =>
    `restored: ${e.device} mac ${e.mac} and ${e.neighbours} neighbour entries in ${e.latencyMs.toFixed(3)} ms${e.deferred ? ' (after backoff)' : ''}`,
  offload: (e) => {
    const states = Object.entries(e.active).map(([name, active]) => `${name}=${onOff(active)}`);
    const side = e.sideEffects.map((s) => `${s.name} ${onOff(s.before)}->${onOff(s.after)}`);
    return `offload: ${e.device} ${states.join(' ')}${e.written ? '' : ' (not written)'} [${e.reason}]${side.length > 0 ? `; also changed: ${side.join(', ')}` : ''}`;
  },
  contested: (e) => `contested: ${e.detail}`,
  resumed: (e) => `resumed: ${e.device} ${e.what}${e.feature === undefined ? '' : ` ${e.feature}`}`,
  released: (e) => `released: ${e.device} (ifindex ${e.ifindex}) ${e.reason}`,
  overrun: (e) => `overrun: netlink events lost (${e.cause}); re-reading the namespace`,
  resync: (e) =>
    e.phase === 'begin'
      ? `resync: begin (${e.reason ?? 'requested'})`
      : `resync: end${e.consistent === false ? ' (inconsistent)' : ''}`,
  error: (e) => `error: ${e.message}`,
};

/** One readable line for a guard event, as `watch` prints it without --json. */
export function describe<Name extends GuardEventName>(
  event: Name,
  payload: FlannelGuardEvents[Name][0],
): string {
  return describers[event](payload);
}

function printer(
  json: boolean,
): <Name extends GuardEventName>(event: Name, payload: FlannelGuardEvents[Name][0]) => void {
  return (event, payload) => {
    const line = json
      ? jsonLine(event, payload)
      : `${new Date().toISOString()} ${describe(event, payload)}`;
    process.stdout.write(`${line}\n`);
  };
}

// --- commands -----------------------------------------------------------------

async function watch(flags: WatchFlags): Promise<number> {
  const options: FlannelGuardOptions = {
    ...commonOptions(flags),
    pin: flags.pin,
    fight: {
      maxRewrites: positiveInteger('--max-rewrites', flags.maxRewrites),
      windowMs: positiveInteger('--rewrite-window', flags.rewriteWindow),
      quietMs: positiveInteger('--quiet-period', flags.quietPeriod),
    },
  };
  if (flags.dryRun) options.dryRun = true;
  if (!flags.kernelFilter) options.kernelFilter = false;
  if (flags.receiveBuffer !== undefined) {
    options.receiveBuffer = positiveInteger('--receive-buffer', flags.receiveBuffer);
  }
  const print = printer(flags.json ?? false);
  const guard = new FlannelGuard(options);
  // Handlers first: a signal that arrives while the guard starts up still closes it cleanly.
  const signal = { received: false };
  const stopped = new Promise<number>((resolve) => {
    const stop = (): void => {
      signal.received = true;
      guard.close();
      resolve(0);
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  const names: GuardEventName[] = [
    'ready',
    'rewrite',
    'restored',
    'adopted',
    'offload',
    'contested',
    'resumed',
    'released',
    'overrun',
    'resync',
    'error',
  ];
  const events = guard as EventEmitter;
  for (const name of names) {
    events.on(name, (payload: FlannelGuardEvents[typeof name][0]) => {
      print(name, payload);
    });
  }
  try {
    await guard.ready();
  } catch (error) {
    guard.close();
    if (!signal.received) throw error; // closed by a signal while starting: a clean stop
  }
  return stopped;
}

async function status(flags: CommonFlags): Promise<number> {
  const options = commonOptions(flags);
  const report = await readStatus(options);
  process.stdout.write(flags.json ? `${JSON.stringify(report)}\n` : formatStatus(report));
  return 0;
}

function formatStatus(report: StatusReport): string {
  const header = ['DEVICE', 'IFINDEX', 'MAC', 'DESIRED', 'MATCH', 'ASSIGN', 'NEIGH', 'OFFLOADS'];
  const rows = report.devices.map((d) => [
    d.name,
    String(d.ifindex),
    d.mac ?? '-',
    d.desiredMac ?? '-',
    d.desiredMac === null ? '-' : d.mac === d.desiredMac ? 'yes' : 'NO',
    d.addrAssignType === null ? '-' : String(d.addrAssignType),
    String(d.permanentNeighbours),
    Object.entries(d.offloads)
      .map(([name, state]) => `${name}=${onOff(state.active)}${state.matchesPolicy ? '' : '(!)'}`)
      .join(' ') || '-',
  ]);
  if (rows.length === 0) return `no managed devices in ${report.netns ?? 'this namespace'}\n`;
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => row[i]?.length ?? 0)),
  );
  return (
    [header, ...rows]
      .map((row) =>
        row
          .map((cell, i) => cell.padEnd(widths[i] ?? 0))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

function packageVersion(): string {
  const manifest = JSON.parse(
    readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8'),
  ) as {
    version: string;
  };
  return manifest.version;
}

function program(): Command {
  const root = new Command('flannel-guard')
    .description("Keeps flannel's VXLAN device at its published MAC and offload policy")
    .version(packageVersion())
    .showHelpAfterError(false)
    .exitOverride();

  const ifaceOption = new Option(
    '--iface <glob>',
    `interfaces to manage, repeatable (default: ${DEFAULT_INTERFACES.join(', ')})`,
  ).argParser(collect);
  const defaultOffload = Object.entries(DEFAULT_OFFLOAD)
    .map(([feature, on]) => `${feature}=${on ? 'on' : 'off'}`)
    .join(', ');
  const offloadOption = new Option(
    '--offload <feature=on|off>',
    `offload policy, repeatable; 'none' leaves offloads alone (default: ${defaultOffload})`,
  ).argParser(collect);
  const netnsOption = new Option(
    '--netns <name>',
    "network namespace, by ip netns name or path (default: this process's own)",
  );
  const macOption = new Option(
    '--mac <iface=mac>',
    'desired MAC of a device, repeatable (default: none)',
  ).argParser(collect);

  root
    .command('watch')
    .description('guard the devices until SIGINT or SIGTERM')
    .addOption(ifaceOption)
    .addOption(macOption)
    .addOption(
      new Option(
        '--pin <mode>',
        'desired MAC of devices without --mac: the first one seen, or none',
      )
        .choices(['first-seen', 'none'])
        .default('first-seen'),
    )
    .addOption(offloadOption)
    .addOption(netnsOption)
    .option('--dry-run', 'report what would be done, never write')
    .option('--json', 'one JSON object per line (field "event" first)')
    .option(
      '--receive-buffer <bytes>',
      'netlink socket receive buffer (default: the kernel default)',
    )
    .option(
      '--no-kernel-filter',
      'let every link notification of the namespace reach the guard (default: filtered in the kernel)',
    )
    .option(
      '--max-rewrites <n>',
      'rewrites within the window after which a device is contested and left alone',
      String(DEFAULT_FIGHT_POLICY.maxRewrites),
    )
    .option(
      '--rewrite-window <ms>',
      'window for counting rewrites',
      String(DEFAULT_FIGHT_POLICY.windowMs),
    )
    .option(
      '--quiet-period <ms>',
      'a contested device is corrected again after this long without a rewrite',
      String(DEFAULT_FIGHT_POLICY.quietMs),
    )
    .action(async (flags: WatchFlags) => {
      process.exitCode = await watch(flags);
    });

  root
    .command('status')
    .description('print the managed devices once: MAC vs desired, offloads, neighbours')
    .addOption(ifaceOption)
    .addOption(macOption)
    .addOption(offloadOption)
    .addOption(netnsOption)
    .option('--json', 'print JSON')
    .action(async (flags: CommonFlags) => {
      process.exitCode = await status(flags);
    });
  return root;
}

function fail(error: unknown): number {
  if (error instanceof CommanderError) {
    if (error.exitCode === 0) return 0; // --help, --version
    return EXIT_USAGE; // commander already printed its one line
  }
  if (error instanceof UsageError) {
    process.stderr.write(`flannel-guard: ${error.message}\n`);
    return EXIT_USAGE;
  }
  if (isSystemError(error) && error.code === 'EINVAL' && error.syscall === undefined) {
    process.stderr.write(`flannel-guard: ${error.message}\n`);
    return EXIT_USAGE;
  }
  if (isSystemError(error) && error.code === 'EPERM') {
    process.stderr.write(
      `flannel-guard: ${error.message}\nflannel-guard: run as root or grant ${error.capability ?? 'CAP_NET_ADMIN'}\n`,
    );
    return EXIT_NOPERM;
  }
  process.stderr.write(
    `flannel-guard: ${error instanceof Error ? error.message : String(error)}\n`,
  );
  return 1;
}

export async function main(argv: string[]): Promise<number> {
  try {
    await program().parseAsync(argv, { from: 'user' });
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (error) {
    return fail(error);
  }
}

if (require.main === module) {
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
