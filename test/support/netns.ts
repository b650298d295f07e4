/**
 * Throw-away network namespaces for privileged integration tests.
 *
 * Every namespace and every tracked child process is registered in a module-level registry.
 * `destroyAll()` (async, for mocha hooks) and a synchronous `process.on('exit')` / signal handler
 * remove whatever is left, so a crashed or interrupted run leaves no namespaces or processes.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { DEFAULT_STATE_DIR } from '../../lib/core/defaults';

/** Options for running a command. */
export interface RunOptions {
  /** Written to the child's stdin (then stdin is closed). */
  input?: string;
  /** Kill the child (SIGKILL) after this many ms. Default 10 000. */
  timeoutMs?: number;
  /** Resolve instead of rejecting on a non-zero exit or timeout. */
  allowFailure?: boolean;
}

/** Result of a finished command. */
export interface RunResult {
  stdout: string;
  stderr: string;
  /** Exit code; 128+signal when killed by a signal; 124 on our timeout. */
  code: number;
  timedOut: boolean;
}

/** Options for polling with `waitFor`. */
export interface WaitForOptions {
  timeoutMs: number;
  /** Delay between attempts (default 20 ms). */
  intervalMs?: number;
  /** Human-readable description used in the timeout error. */
  what: string;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const MAX_CAPTURE = 16 * 1024 * 1024;

/** Error thrown when a command fails; carries the full result. */
export class CommandError extends Error {
  constructor(
    readonly argv: readonly string[],
    readonly result: RunResult,
  ) {
    const why = result.timedOut ? 'timed out' : `exited with code ${result.code}`;
    const stderr = result.stderr.trim();
    super(`command ${why}: ${argv.join(' ')}${stderr === '' ? '' : `\nstderr: ${stderr}`}`);
    this.name = 'CommandError';
  }
}

function signalCode(signal: NodeJS.Signals | null): number {
  if (signal === null) return 1;
  const n = (
    {
      SIGHUP: 1,
      SIGINT: 2,
      SIGKILL: 9,
      SIGTERM: 15,
    } as Partial<Record<NodeJS.Signals, number>>
  )[signal];
  return 128 + (n ?? 0);
}

/**
 * Run a command to completion (no shell). Rejects with a `CommandError` (including stderr) on a
 * non-zero exit or timeout unless `allowFailure` is set.
 */
export function execFile(
  cmd: string,
  args: readonly string[],
  opts: RunOptions = {},
): Promise<RunResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const argv = [cmd, ...args];
  return new Promise<RunResult>((resolve, reject) => {
    let child: ChildProcess;
    try {
      child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (err) {
      reject(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    let spawnError: Error | undefined;
    child.stdout?.setEncoding('utf8');
    child.stderr?.setEncoding('utf8');
    child.stdout?.on('data', (d: string) => {
      if (stdout.length < MAX_CAPTURE) stdout += d;
    });
    child.stderr?.on('data', (d: string) => {
      if (stderr.length < MAX_CAPTURE) stderr += d;
    });
    child.stdin?.on('error', () => {
      /* child may exit before reading its input */
    });
    child.on('error', (err) => {
      spawnError = err;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (spawnError !== undefined && code === null && signal === null) {
        reject(new Error(`cannot run ${argv.join(' ')}: ${spawnError.message}`));
        return;
      }
      const result: RunResult = {
        stdout,
        stderr,
        code: timedOut ? 124 : (code ?? signalCode(signal)),
        timedOut,
      };
      if ((result.code !== 0 || timedOut) && opts.allowFailure !== true) {
        reject(new CommandError(argv, result));
      } else {
        resolve(result);
      }
    });
    if (opts.input !== undefined) child.stdin?.end(opts.input);
    else child.stdin?.end();
  });
}

/** Run a command and return its stdout (rejects on failure). */
export async function execFileText(
  cmd: string,
  args: readonly string[],
  opts: Omit<RunOptions, 'allowFailure'> = {},
): Promise<string> {
  return (await execFile(cmd, args, opts)).stdout;
}

/**
 * How many times slower than native this run executes: scripts/valgrind.mjs
 * sets FLANNEL_GUARD_TEST_SLOWDOWN for node under memcheck. Tests whose
 * subject is a time interval scale it by this, so the interval still dwarfs
 * the test's own steps.
 */
export const slowdown = ((): number => {
  const factor = Number(process.env.FLANNEL_GUARD_TEST_SLOWDOWN ?? 1);
  return Number.isFinite(factor) && factor >= 1 && factor <= 100 ? factor : 1;
})();

/** Promise-based sleep. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Bounded polling: calls `predicate` until it returns a truthy value (which is returned) or the
 * time runs out. Use only where there is no event to await. A throwing predicate counts as "not
 * yet"; its last error is included in the timeout message.
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  opts: WaitForOptions,
): Promise<NonNullable<T>> {
  const interval = Math.max(1, opts.intervalMs ?? 20);
  const deadline = Date.now() + opts.timeoutMs;
  const maxAttempts = Math.ceil(opts.timeoutMs / interval) + 2;
  let lastError: unknown;
  for (let attempt = 0; attempt < maxAttempts; attempt++) {
    try {
      const v = await predicate();
      if (v !== undefined && v !== null && v !== false && (v as unknown) !== 0 && v !== '') {
        return v;
      }
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) break;
    await delay(Math.min(interval, Math.max(0, deadline - Date.now())));
  }
  const suffix =
    lastError === undefined
      ? ''
      : ` (last error: ${lastError instanceof Error ? lastError.message : JSON.stringify(lastError)})`;
  throw new Error(`timed out after ${opts.timeoutMs} ms waiting for ${opts.what}${suffix}`);
}

/**
 * Blocks the thread, sleeping 1 ms at a time (never spinning), until `done` holds or `ms` have
 * passed; whether it holds. For a test that keeps the event loop from running while another
 * thread (the monitor's reader) does its part.
 */
export function blockUntil(done: () => boolean, ms: number): boolean {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const until = Date.now() + ms;
  while (!done() && Date.now() < until) Atomics.wait(cell, 0, 0, 1);
  return done();
}

// ---------------------------------------------------------------------------------------------
// Registry and crash-safe cleanup
// ---------------------------------------------------------------------------------------------

const liveNamespaces = new Set<Netns>();
const trackedChildren = new Set<ChildProcess>();
const syncCleanups = new Set<() => void>();
let handlersInstalled = false;
let counter = 0;

function killQuietly(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(pid, signal);
  } catch {
    /* already gone */
  }
}

/** PIDs of all processes whose network namespace is `name` (`ip netns pids`). Synchronous. */
function netnsPidsSync(name: string): number[] {
  const r = spawnSync('ip', ['netns', 'pids', name], {
    encoding: 'utf8',
    timeout: 5000,
  });
  if (r.status !== 0 || typeof r.stdout !== 'string') return [];
  return r.stdout
    .split(/\s+/)
    .filter((s) => /^\d+$/.test(s))
    .map(Number)
    .filter((pid) => pid !== process.pid);
}

/** Synchronous last-resort cleanup: kill everything we started, delete all our namespaces. */
export function cleanupSync(): void {
  for (const child of trackedChildren) {
    if (child.exitCode === null && child.signalCode === null) killQuietly(child.pid, 'SIGKILL');
  }
  trackedChildren.clear();
  for (const fn of syncCleanups) {
    try {
      fn();
    } catch {
      /* best effort */
    }
  }
  syncCleanups.clear();
  for (const ns of liveNamespaces) {
    for (const pid of netnsPidsSync(ns.name)) killQuietly(pid, 'SIGKILL');
    spawnSync('ip', ['netns', 'del', ns.name], {
      timeout: 5000,
      stdio: 'ignore',
    });
  }
  liveNamespaces.clear();
}

function installHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on('exit', cleanupSync);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      cleanupSync();
      process.removeListener(sig, handler);
      // Re-raise so the default action (or other listeners, e.g. mocha's) still happen.
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    };
    process.on(sig, handler);
  }
}

/**
 * Register a synchronous cleanup function (e.g. removing a temp dir) that runs in `cleanupSync`
 * (process exit / signal). Returns a function that unregisters it.
 */
export function registerSyncCleanup(fn: () => void): () => void {
  installHandlers();
  syncCleanups.add(fn);
  return () => {
    syncCleanups.delete(fn);
  };
}

/**
 * Track a child process for cleanup: it is SIGKILLed by `destroyAll()` and on process exit. The
 * child is untracked automatically once it exits.
 */
export function trackChild(child: ChildProcess): ChildProcess {
  installHandlers();
  if (child.exitCode !== null || child.signalCode !== null) return child;
  trackedChildren.add(child);
  child.once('exit', () => trackedChildren.delete(child));
  return child;
}

/** Whether the child has exited (or never started). */
export function hasExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null || child.pid === undefined;
}

/** Wait for the child to exit, at most `timeoutMs`; resolves true if it exited. */
export function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (hasExited(child)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onExit = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      child.removeListener('exit', onExit);
      resolve(hasExited(child));
    }, timeoutMs);
    child.once('exit', onExit);
  });
}

/** SIGTERM (or `signal`), then SIGKILL after `graceMs`; resolves once the child has exited. */
export async function terminate(
  child: ChildProcess,
  graceMs = 2000,
  signal: NodeJS.Signals = 'SIGTERM',
): Promise<void> {
  if (hasExited(child)) return;
  child.kill(signal);
  if (await waitForExit(child, graceMs)) return;
  child.kill('SIGKILL');
  if (!(await waitForExit(child, 5000))) {
    throw new Error(`process ${child.pid ?? '?'} did not exit after SIGKILL`);
  }
}

/** Options for `Netns.spawn`. */
export interface NetnsSpawnOptions {
  stdio?: SpawnOptions['stdio'];
  env?: NodeJS.ProcessEnv;
}

/** A throw-away network namespace, `/run/netns/NAME`, with `lo` up. */
export class Netns {
  readonly path: string;
  private destroyed = false;
  private readonly children = new Set<ChildProcess>();

  private constructor(readonly name: string) {
    this.path = `/run/netns/${name}`;
  }

  /** Create a uniquely named namespace `PREFIX-<pid>-<n>` and bring `lo` up. */
  static async create(prefix = 'fgt'): Promise<Netns> {
    if (!/^[A-Za-z0-9_.-]{1,40}$/.test(prefix)) throw new Error(`bad netns prefix: ${prefix}`);
    installHandlers();
    const ns = new Netns(`${prefix}-${process.pid}-${++counter}`);
    await execFile('ip', ['netns', 'add', ns.name]);
    liveNamespaces.add(ns);
    try {
      await ns.ip('link set lo up');
    } catch (err) {
      await ns.destroy();
      throw err;
    }
    return ns;
  }

  /** Whether `destroy()` has been called. */
  get isDestroyed(): boolean {
    return this.destroyed;
  }

  /** Run `ip netns exec NAME argv...` to completion. */
  run(argv: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
    this.assertAlive();
    if (argv.length === 0) throw new Error('Netns.run: empty argv');
    return execFile('ip', ['netns', 'exec', this.name, ...argv], opts);
  }

  /** `ip -n NAME ARGS` (args split on whitespace); returns stdout. */
  async ip(
    args: string | readonly string[],
    opts: Omit<RunOptions, 'allowFailure'> = {},
  ): Promise<string> {
    this.assertAlive();
    return execFileText('ip', ['-n', this.name, ...splitArgs(args)], opts);
  }

  /** `ip -j -n NAME ARGS`, parsed as JSON. */
  async ipJson<T>(args: string | readonly string[]): Promise<T> {
    this.assertAlive();
    const out = await execFileText('ip', ['-j', '-n', this.name, ...splitArgs(args)]);
    return JSON.parse(out.trim() === '' ? '[]' : out) as T;
  }

  /** `ip -n NAME -batch -` with the given lines; returns stdout. */
  async ipBatch(lines: readonly string[], opts: { json?: boolean } = {}): Promise<string> {
    this.assertAlive();
    const args = [...(opts.json === true ? ['-j'] : []), '-n', this.name, '-batch', '-'];
    return execFileText('ip', args, { input: lines.join('\n') + '\n' });
  }

  /** `bridge -n NAME ARGS`; returns stdout. */
  async bridge(args: string | readonly string[]): Promise<string> {
    this.assertAlive();
    return execFileText('bridge', ['-n', this.name, ...splitArgs(args)]);
  }

  /** Read a file as seen from inside the namespace (sysfs/procfs are namespace-specific). */
  async readFile(path: string): Promise<string> {
    return (await this.run(['cat', path])).stdout;
  }

  /** `sysctl -w KEY=VALUE` inside the namespace. */
  async sysctl(key: string, value: string | number): Promise<void> {
    await this.run(['sysctl', '-q', '-w', `${key}=${value}`]);
  }

  /**
   * Spawn `ip netns exec NAME argv...` in the background. The child is tracked: `destroy()`,
   * `destroyAll()` and process exit kill it.
   */
  spawn(argv: readonly string[], opts: NetnsSpawnOptions = {}): ChildProcess {
    this.assertAlive();
    if (argv.length === 0) throw new Error('Netns.spawn: empty argv');
    const child = spawn('ip', ['netns', 'exec', this.name, ...argv], {
      stdio: opts.stdio ?? ['ignore', 'pipe', 'pipe'],
      env: opts.env ?? process.env,
    });
    // An 'error' event without listener would crash the test run; surface it via exit instead.
    child.on('error', () => {
      /* reported through 'exit'/'close' or the caller's own listener */
    });
    trackChild(child);
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  /** PIDs of all processes currently in this namespace. */
  async pids(): Promise<number[]> {
    const r = await execFile('ip', ['netns', 'pids', this.name], {
      allowFailure: true,
    });
    return r.stdout
      .split(/\s+/)
      .filter((s) => /^\d+$/.test(s))
      .map(Number)
      .filter((pid) => pid !== process.pid);
  }

  /**
   * Kill tracked processes (SIGTERM, then SIGKILL), kill any other process still inside the
   * namespace, then `ip netns del`. Idempotent.
   */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    try {
      await Promise.all([...this.children].map((c) => terminate(c, 1000).catch(() => undefined)));
      if (existsSync(this.path)) {
        const leftovers = await this.pids();
        for (const pid of leftovers) killQuietly(pid, 'SIGKILL');
        if (leftovers.length > 0) {
          await waitFor(async () => (await this.pids()).length === 0, {
            timeoutMs: 3000,
            what: `processes in netns ${this.name} to exit`,
          }).catch(() => undefined);
        }
        await execFile('ip', ['netns', 'del', this.name], {
          allowFailure: true,
        });
      }
    } finally {
      liveNamespaces.delete(this);
    }
  }

  private assertAlive(): void {
    if (this.destroyed) throw new Error(`netns ${this.name} has been destroyed`);
  }
}

function splitArgs(args: string | readonly string[]): string[] {
  if (typeof args !== 'string') return [...args];
  return args.split(/\s+/).filter((s) => s !== '');
}

/** Names of namespaces this process still has registered. */
export function liveNetnsNames(): string[] {
  return [...liveNamespaces].map((ns) => ns.name);
}

/** Destroy every registered namespace and kill every tracked child. Safe to call repeatedly. */
export async function destroyAll(): Promise<void> {
  const children = [...trackedChildren];
  await Promise.all(children.map((c) => terminate(c, 1000).catch(() => undefined)));
  await Promise.all([...liveNamespaces].map((ns) => ns.destroy()));
  for (const fn of [...syncCleanups]) {
    try {
      fn();
    } catch {
      /* best effort */
    }
  }
  syncCleanups.clear();
}

/**
 * Whether a process with this PID runs, asked of the kernel (kill 0) in the caller's own PID
 * namespace, the one `process.pid` is counted in: /proc may be mounted from another, where a
 * live process's PID names some other process or none. A PID reused since its run was killed
 * keeps that run's leftovers until the PID is gone: reaping less is the safe side.
 */
function isLiveProcess(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Mount points at or under `dir` in this mount namespace, deepest first. */
function mountsUnder(dir: string): string[] {
  const unescape = (path: string): string =>
    path.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => unescape(line.split(' ')[4] ?? ''))
    .filter((point) => point === dir || point.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

/**
 * Removes a stale work folder. A killed run may have left a file system mounted in it
 * (debootstrap's /proc, a test's tmpfs): each is detached first, so that the removal never
 * descends into a mount, and never into what a bind mount shows of the machine.
 */
function removeStaleDir(dir: string): void {
  for (const point of mountsUnder(dir)) spawnSync('umount', ['--lazy', point], { stdio: 'ignore' });
  if (mountsUnder(dir).length > 0) throw new Error(`${dir}: a mount under it would not detach`);
  rmSync(dir, { recursive: true, force: true });
}

/** Temp-dir prefix for helpers: `/tmp/fgt-KIND-<pid>-XXXXXX`, reapable by `reapStale`. */
export function tempDirPrefix(kind: string): string {
  return join(tmpdir(), `fgt-${kind}-${process.pid}-`);
}

/** What `reapStale` removed. */
export interface ReapResult {
  namespaces: string[];
  tempDirs: string[];
}

/**
 * Remove what earlier, killed (SIGKILL) runs left behind, i.e. objects named after a PID that no
 * process has now. The test runner calls it once, before its lanes start: a run in progress
 * owns objects of the same shape, named after its live PIDs.
 *  - namespaces `PREFIX*-<pid>-<n>` (e.g. `fgt-123-4`, `fgt-mon-123-4`); any process still
 *    inside one is killed first;
 *  - temp dirs `/tmp/PREFIX-*-<pid>-*` (udevd config, pcap files).
 */
export async function reapStale(prefix = 'fgt'): Promise<ReapResult> {
  const esc = prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const result: ReapResult = { namespaces: [], tempDirs: [] };
  let names: string[];
  try {
    names = readdirSync('/run/netns');
  } catch {
    names = [];
  }
  const nsRe = new RegExp(`^${esc}[A-Za-z0-9_.-]*-(\\d+)-\\d+$`);
  for (const name of names) {
    const m = nsRe.exec(name);
    if (m === null || isLiveProcess(Number(m[1]))) continue;
    for (const p of netnsPidsSync(name)) killQuietly(p, 'SIGKILL');
    await execFile('ip', ['netns', 'del', name], { allowFailure: true });
    result.namespaces.push(name);
  }
  const dirRe = new RegExp(`^${esc}-[a-z][a-z-]*-(\\d+)-[A-Za-z0-9]{6}$`);
  for (const name of readdirSync(tmpdir())) {
    const m = dirRe.exec(name);
    if (m === null || isLiveProcess(Number(m[1]))) continue;
    removeStaleDir(join(tmpdir(), name));
    result.tempDirs.push(name);
  }
  return result;
}

/** The machine's own folders that tests must never write to (each test writes under a root of its own). */
export const MACHINE_PATHS = ['/etc/systemd/network', '/etc/NetworkManager', DEFAULT_STATE_DIR];

/** Names, sizes and times of what is under `path` (bounded), as a comparable text. */
export function snapshotTree(path: string, limit = 2000): string {
  const lines: string[] = [];
  const walk = (dir: string, depth: number): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (error) {
      lines.push(`${dir}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
      return;
    }
    for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (lines.length >= limit) return;
      const full = join(dir, entry.name);
      try {
        const stat = lstatSync(full);
        lines.push(`${full} ${stat.size} ${stat.mtimeMs}`);
      } catch {
        lines.push(`${full} gone`);
      }
      if (entry.isDirectory() && depth < 4) walk(full, depth + 1);
    }
  };
  walk(path, 0);
  return lines.join('\n');
}

const machineBefore = new Map<string, string>();
let stateRoot: string | undefined;

/**
 * Points the CLI's default state dir at a folder of this process's own (FLANNEL_GUARD_STATE_DIR,
 * which child processes inherit), so that no test or benchmark writes the machine's
 * /run/flannel-guard. Idempotent; `releaseStateRoot` removes the folder.
 */
export function claimStateRoot(): void {
  if (stateRoot !== undefined) return;
  stateRoot = mkdtempSync(tempDirPrefix('state'));
  process.env.FLANNEL_GUARD_STATE_DIR = stateRoot;
}

export function releaseStateRoot(): void {
  if (stateRoot === undefined) return;
  rmSync(stateRoot, { recursive: true, force: true });
  stateRoot = undefined;
  delete process.env.FLANNEL_GUARD_STATE_DIR;
}

export const mochaHooks = {
  beforeAll(): void {
    if (stateRoot !== undefined) return;
    claimStateRoot();
    for (const path of MACHINE_PATHS) machineBefore.set(path, snapshotTree(path));
  },
  async afterAll(): Promise<void> {
    await destroyAll();
    releaseStateRoot();
    const changed = MACHINE_PATHS.filter((path) => snapshotTree(path) !== machineBefore.get(path));
    if (changed.length > 0) {
      throw new Error(`a test wrote outside its own roots: ${changed.join(', ')} changed`);
    }
  },
};
