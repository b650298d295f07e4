#!/usr/bin/env node
/**
 * flannel-guard-cni: a chained CNI plugin (spec 1.0.0 and 1.1.0) that runs
 * ensureVtep on the node's VXLAN device every time a pod is added.
 *
 *   ADD     ensureVtep (fixes MAC, neighbours, offloads); prints prevResult unchanged
 *   CHECK   ensureVtep as a dry run; error 100 when the VTEP drifted, 101 when it is missing
 *   DEL     nothing to release; succeeds
 *   STATUS  error 50 when the VTEP is missing or cannot be read
 *   GC      holds no per-attachment state; succeeds
 *   VERSION the supported spec versions
 *
 * A time budget (plugin config `budgetMs`, counted from the moment the
 * configuration has been read) bounds every command: on ADD, when it runs out, prevResult is printed and the
 * plugin exits 0 so pod creation is never held up by the guard; CHECK and
 * STATUS answer error 11 (try again later). Problems during ADD are reported
 * on stderr and do not fail the pod unless `failOnError` is set.
 *
 * Errors are the spec's error object on stdout with a non-zero exit status.
 */
import { writeSync } from 'node:fs';

import { monotonicMs } from '../core/clock';
import type { EnsureVtepResult } from '../ensure/ensure';
import { MAX_PEERS, validatePeer, type PeerExpectation } from '../ensure/peers';
import { readRegularFile } from '../core/files';
import { isSystemError } from '../core/errors';
import { RANGES, describeRange, parseMac, validateInterfaceName } from '../core/validate';
import { packageVersion } from '../core/package-version';

export const SUPPORTED_VERSIONS = ['1.0.0', '1.1.0'] as const;
export const DEFAULT_BUDGET_MS = 1000;
/** A network configuration with MAX_PEERS peers is about 1 MiB. */
export const MAX_STDIN_BYTES = 8 * 1024 * 1024;
export const MAX_EXPECT_FILE_BYTES = 8 * 1024 * 1024;
/**
 * After the budget the writes stop and the result is reported; should a
 * system call hang past this much more, the plugin answers and exits anyway.
 */
const BACKSTOP_MS = 250;
/**
 * A runtime writes the whole configuration at once and closes stdin; one that has not in this
 * long never will. Bounded apart from the budget, which the configuration sets.
 */
export const STDIN_TIMEOUT_MS = 10_000;

/** The spec's well-known error codes, and this plugin's own (100+). */
export const CNI_ERRORS = {
  INCOMPATIBLE_VERSION: 1,
  UNSUPPORTED_FIELD: 2,
  UNKNOWN_CONTAINER: 3,
  INVALID_ENVIRONMENT: 4,
  IO_FAILURE: 5,
  DECODING_FAILURE: 6,
  INVALID_CONFIG: 7,
  TRY_AGAIN_LATER: 11,
  NOT_AVAILABLE: 50,
  NOT_AVAILABLE_LIMITED: 51,
  VTEP_DRIFTED: 100,
  VTEP_UNAVAILABLE: 101,
} as const;

const COMMANDS = ['ADD', 'DEL', 'CHECK', 'VERSION', 'STATUS', 'GC'] as const;
type Command = (typeof COMMANDS)[number];

export class CniError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly details?: string,
  ) {
    super(message);
  }
}

/** The plugin's own configuration fields (besides cniVersion, name, type, prevResult). */
export interface PluginConfig {
  /** The VXLAN device (default flannel.1). */
  device: string;
  /** This node's published VtepMAC. */
  mac?: string;
  /** The other nodes' published VTEPs. */
  peers: PeerExpectation[];
  /**
   * A JSON file `{ "mac"?: string, "peers"?: PeerExpectation[] }` written by whatever knows
   * the published state (read without blocking; its fields win over `mac` and `peers`; a
   * missing file means nothing is published yet).
   */
  expectFile?: string;
  offload: Record<string, boolean> | 'none' | undefined;
  budgetMs: number;
  /** Fail ADD when the VTEP cannot be checked or fixed (default false: report and go on). */
  failOnError: boolean;
}

export interface CniRequest {
  command: Command;
  cniVersion: string;
  config: Record<string, unknown>;
  plugin: PluginConfig;
}

export interface CniEnvironment {
  [name: string]: string | undefined;
}

function required(env: CniEnvironment, name: string, command: Command): string {
  const value = env[name];
  if (value === undefined || value === '') {
    throw new CniError(
      CNI_ERRORS.INVALID_ENVIRONMENT,
      `required env variable ${name} missing`,
      `${command} needs ${name}`,
    );
  }
  return value;
}

/** Checks the environment variables the spec requires for `command` (as libcni's skel does). */
export function checkEnvironment(env: CniEnvironment): Command {
  const raw = env.CNI_COMMAND;
  if (raw === undefined || raw === '') {
    throw new CniError(CNI_ERRORS.INVALID_ENVIRONMENT, 'required env variable CNI_COMMAND missing');
  }
  const command = COMMANDS.find((c) => c === raw);
  if (command === undefined) {
    throw new CniError(CNI_ERRORS.INVALID_ENVIRONMENT, `unknown CNI_COMMAND: ${raw}`);
  }
  if (command === 'ADD' || command === 'CHECK' || command === 'DEL') {
    const containerId = required(env, 'CNI_CONTAINERID', command);
    if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(containerId)) {
      throw new CniError(
        CNI_ERRORS.INVALID_ENVIRONMENT,
        'invalid characters in CNI_CONTAINERID',
        containerId,
      );
    }
    const ifname = required(env, 'CNI_IFNAME', command);
    try {
      validateInterfaceName(ifname, 'CNI_IFNAME');
    } catch (error) {
      throw new CniError(
        CNI_ERRORS.INVALID_ENVIRONMENT,
        'invalid CNI_IFNAME',
        error instanceof Error ? error.message : String(error),
      );
    }
    if (command !== 'DEL') required(env, 'CNI_NETNS', command);
    required(env, 'CNI_PATH', command);
  }
  return command;
}

function versionAtLeast(version: string, minimum: string): boolean {
  const parse = (v: string): number[] => v.split('.').map((part) => Number(part));
  const [a, b] = [parse(version), parse(minimum)];
  for (let i = 0; i < 3; i += 1) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

function invalidConfig(message: string, details?: string): CniError {
  return new CniError(CNI_ERRORS.INVALID_CONFIG, message, details);
}

/** The plugin's fields of a network configuration, validated. */
export function parsePluginConfig(config: Record<string, unknown>): PluginConfig {
  const plugin: PluginConfig = {
    device: 'flannel.1',
    peers: [],
    offload: undefined,
    budgetMs: DEFAULT_BUDGET_MS,
    failOnError: false,
  };
  const wrap = <T>(field: string, parse: () => T): T => {
    try {
      return parse();
    } catch (error) {
      throw invalidConfig(
        `invalid ${field}`,
        error instanceof Error ? error.message : String(error),
      );
    }
  };
  if (config.device !== undefined) {
    plugin.device = wrap('device', () => validateInterfaceName(config.device, 'device'));
  }
  if (config.mac !== undefined) plugin.mac = wrap('mac', () => parseMac(config.mac));
  if (config.peers !== undefined) {
    if (!Array.isArray(config.peers)) throw invalidConfig('invalid peers', 'must be an array');
    if (config.peers.length > MAX_PEERS) {
      throw invalidConfig('invalid peers', `${config.peers.length} peers: at most ${MAX_PEERS}`);
    }
    plugin.peers = wrap('peers', () =>
      (config.peers as PeerExpectation[]).map((peer) => validatePeer(peer)),
    );
  }
  if (config.expectFile !== undefined) {
    if (typeof config.expectFile !== 'string' || !config.expectFile.startsWith('/')) {
      throw invalidConfig('invalid expectFile', 'must be an absolute path');
    }
    plugin.expectFile = config.expectFile;
  }
  if (config.offload !== undefined) {
    const offload = config.offload;
    if (offload === 'none') plugin.offload = 'none';
    else if (
      typeof offload === 'object' &&
      offload !== null &&
      !Array.isArray(offload) &&
      Object.values(offload).every((v) => typeof v === 'boolean')
    ) {
      plugin.offload = offload as Record<string, boolean>;
    } else {
      throw invalidConfig('invalid offload', 'an object of feature name to boolean, or "none"');
    }
  }
  if (config.budgetMs !== undefined) {
    const budget = config.budgetMs;
    const range = RANGES.cniBudgetMs;
    if (
      typeof budget !== 'number' ||
      !Number.isInteger(budget) ||
      budget < range.min ||
      budget > range.max
    ) {
      throw invalidConfig('invalid budgetMs', describeRange(range));
    }
    plugin.budgetMs = budget;
  }
  if (config.failOnError !== undefined) {
    if (typeof config.failOnError !== 'boolean') {
      throw invalidConfig('invalid failOnError', 'must be a boolean');
    }
    plugin.failOnError = config.failOnError;
  }
  return plugin;
}

/** Parses stdin into a request for `command`, enforcing the spec's version rules. */
export function parseRequest(command: Command, stdin: string): CniRequest {
  let config: unknown;
  try {
    config = stdin.trim() === '' && command === 'VERSION' ? {} : JSON.parse(stdin);
  } catch (error) {
    throw new CniError(
      CNI_ERRORS.DECODING_FAILURE,
      'failed to decode the network configuration',
      error instanceof Error ? error.message : String(error),
    );
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new CniError(CNI_ERRORS.DECODING_FAILURE, 'the network configuration is not an object');
  }
  const object = config as Record<string, unknown>;
  const cniVersion = object.cniVersion;
  if (command === 'VERSION') {
    return {
      command,
      cniVersion: typeof cniVersion === 'string' ? cniVersion : '1.1.0',
      config: object,
      plugin: parsePluginConfig({}),
    };
  }
  if (typeof cniVersion !== 'string' || cniVersion === '') {
    throw invalidConfig('cniVersion missing from the network configuration');
  }
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(cniVersion)) {
    throw new CniError(
      CNI_ERRORS.INCOMPATIBLE_VERSION,
      'incompatible CNI versions',
      `config is "${cniVersion}", plugin supports ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  if ((command === 'STATUS' || command === 'GC') && !versionAtLeast(cniVersion, '1.1.0')) {
    throw new CniError(
      CNI_ERRORS.INCOMPATIBLE_VERSION,
      `config version does not allow ${command}`,
      `${command} needs cniVersion 1.1.0 or later, config is "${cniVersion}"`,
    );
  }
  if (typeof object.name !== 'string' || object.name === '') {
    throw invalidConfig('name missing from the network configuration');
  }
  if (typeof object.type !== 'string' || object.type === '') {
    throw invalidConfig('type missing from the network configuration');
  }
  const prevResult = object.prevResult;
  if (prevResult !== undefined && (typeof prevResult !== 'object' || prevResult === null)) {
    throw invalidConfig('prevResult is not an object');
  }
  if ((command === 'ADD' || command === 'CHECK') && prevResult === undefined) {
    throw invalidConfig(
      `${object.type} must be called as a chained plugin`,
      `${command} needs a prevResult (put it after the plugin that creates the interface)`,
    );
  }
  return { command, cniVersion, config: object, plugin: parsePluginConfig(object) };
}

/** The published state: plugin config, overridden by the expect file's fields. */
export function expectations(plugin: PluginConfig): { mac?: string; peers: PeerExpectation[] } {
  const result: { mac?: string; peers: PeerExpectation[] } = { peers: plugin.peers };
  if (plugin.mac !== undefined) result.mac = plugin.mac;
  if (plugin.expectFile === undefined) return result;
  let text: string | null;
  try {
    text = readRegularFile(plugin.expectFile, MAX_EXPECT_FILE_BYTES, 'expectFile', {
      missing: 'null',
    });
  } catch (error) {
    throw new CniError(
      CNI_ERRORS.IO_FAILURE,
      `cannot read expectFile ${plugin.expectFile}`,
      error instanceof Error ? error.message : String(error),
    );
  }
  // Not written yet: nothing is published, so only the configured fields apply.
  if (text === null) return result;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new CniError(
      CNI_ERRORS.DECODING_FAILURE,
      `expectFile ${plugin.expectFile} is not JSON`,
      error instanceof Error ? error.message : String(error),
    );
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new CniError(
      CNI_ERRORS.DECODING_FAILURE,
      `expectFile ${plugin.expectFile} does not hold a JSON object`,
      `found ${parsed === null ? 'null' : Array.isArray(parsed) ? 'an array' : typeof parsed}; expected { "mac"?: string, "peers"?: [...] }`,
    );
  }
  const file = parsePluginConfig(parsed as Record<string, unknown>);
  const raw = parsed as { mac?: unknown; peers?: unknown };
  if (raw.mac !== undefined && file.mac !== undefined) result.mac = file.mac;
  if (raw.peers !== undefined) result.peers = file.peers;
  return result;
}

/** Drifts named in a log line or error; the rest are counted (thousands of peers). */
const DRIFTS_SHOWN = 5;

function describeDrift(result: EnsureVtepResult): string {
  const shown = result.drift
    .slice(0, DRIFTS_SHOWN)
    .map(
      (d) =>
        `${d.kind}${d.subject === undefined ? '' : ` ${d.subject}`}: expected ${d.expected}, found ${d.observed}`,
    )
    .join('; ');
  const more = result.drift.length - DRIFTS_SHOWN;
  return more > 0 ? `${shown}; and ${more} more` : shown;
}

function vtepError(code: number, plugin: PluginConfig, error: unknown): CniError {
  if (error instanceof CniError) return error;
  const reason =
    isSystemError(error) && error.code === 'ENODEV'
      ? `${plugin.device} does not exist`
      : error instanceof Error
        ? error.message
        : String(error);
  return new CniError(code, `VTEP ${plugin.device} unavailable`, reason);
}

export interface CniResponse {
  /** Exit status. */
  status: number;
  /** The JSON printed on stdout (undefined: nothing). */
  stdout?: unknown;
  /** Lines for stderr. */
  log: string[];
}

async function ensure(
  plugin: PluginConfig,
  dryRun: boolean,
  signal: AbortSignal | undefined,
): Promise<EnsureVtepResult> {
  const expected = expectations(plugin);
  // Loaded here, with the addon: VERSION, DEL and GC never need them.
  const { ensureVtep } = await import('../ensure/ensure.js');
  return ensureVtep({
    device: plugin.device,
    ...(expected.mac === undefined ? {} : { mac: expected.mac }),
    peers: expected.peers,
    ...(plugin.offload === undefined ? {} : { offload: plugin.offload }),
    dryRun,
    ...(signal === undefined ? {} : { signal }),
  });
}

/**
 * Runs one command; a failure is thrown as a CniError (main prints it as the
 * spec's error object). `signal` aborts at the budget: ADD then stops writing
 * and reports the partial repair.
 */
export async function handle(request: CniRequest, signal?: AbortSignal): Promise<CniResponse> {
  const { plugin } = request;
  switch (request.command) {
    case 'VERSION':
      return {
        status: 0,
        stdout: { cniVersion: request.cniVersion, supportedVersions: [...SUPPORTED_VERSIONS] },
        log: [],
      };
    case 'DEL':
    case 'GC':
      return { status: 0, log: [] };
    case 'ADD': {
      const log: string[] = [];
      try {
        const result = await ensure(plugin, false, signal);
        if (result.interrupted) {
          const message = `flannel-guard-cni: ${plugin.device}: the ${plugin.budgetMs} ms budget ran out with ${result.actions.length} writes made: a partial repair (${describeDrift(result)})`;
          if (plugin.failOnError) {
            throw new CniError(
              CNI_ERRORS.TRY_AGAIN_LATER,
              `VTEP ${plugin.device} partly repaired`,
              message,
            );
          }
          log.push(`${message}; pod creation goes on`);
          return { status: 0, stdout: request.config.prevResult, log };
        }
        if (result.actions.length > 0) {
          log.push(
            `flannel-guard-cni: ${plugin.device} repaired in ${result.durationMs.toFixed(1)} ms: ${describeDrift(result)}`,
          );
        }
        if (!result.ok) {
          const message = `flannel-guard-cni: ${plugin.device} still not as desired: ${describeDrift(result)}`;
          if (plugin.failOnError) {
            throw new CniError(CNI_ERRORS.VTEP_DRIFTED, `VTEP ${plugin.device} drifted`, message);
          }
          log.push(message);
        }
      } catch (error) {
        const failure = vtepError(CNI_ERRORS.VTEP_UNAVAILABLE, plugin, error);
        if (plugin.failOnError) throw failure;
        log.push(
          `flannel-guard-cni: ${failure.message}: ${failure.details ?? ''} (pod creation goes on)`,
        );
      }
      return { status: 0, stdout: request.config.prevResult, log };
    }
    case 'CHECK': {
      let result: EnsureVtepResult;
      try {
        result = await ensure(plugin, true, signal);
      } catch (error) {
        throw vtepError(CNI_ERRORS.VTEP_UNAVAILABLE, plugin, error);
      }
      if (!result.ok) {
        throw new CniError(
          CNI_ERRORS.VTEP_DRIFTED,
          `VTEP ${plugin.device} drifted`,
          describeDrift(result),
        );
      }
      return { status: 0, log: [] };
    }
    case 'STATUS': {
      try {
        await ensure(plugin, true, signal);
      } catch (error) {
        throw vtepError(CNI_ERRORS.NOT_AVAILABLE, plugin, error);
      }
      return { status: 0, log: [] };
    }
  }
}

export function errorObject(cniVersion: string, error: CniError): Record<string, unknown> {
  const object: Record<string, unknown> = { cniVersion, code: error.code, msg: error.message };
  if (error.details !== undefined) object.details = error.details;
  return object;
}

/** How long a full stdout or stderr pipe may hold up the answer before it is given up. */
const WRITE_PATIENCE_MS = 2000;

/** Writes all of `text`; a full non-blocking pipe (EAGAIN) is waited for, within bounds. */
function write(fd: number, text: string): void {
  const buffer = Buffer.from(text);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const deadline = monotonicMs() + WRITE_PATIENCE_MS;
  for (let offset = 0; offset < buffer.length;) {
    try {
      offset += writeSync(fd, buffer, offset);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN' || monotonicMs() > deadline) {
        return; // the reader is gone or stuck: nothing more can be said there
      }
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

/** All of stdin up to MAX_STDIN_BYTES; past that it stops reading and rejects. */
function readStdin(): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const onData = (chunk: Buffer): void => {
      length += chunk.length;
      if (length > MAX_STDIN_BYTES) {
        process.stdin.off('data', onData);
        process.stdin.destroy();
        reject(
          new CniError(
            CNI_ERRORS.DECODING_FAILURE,
            'failed to decode the network configuration',
            `stdin is larger than ${MAX_STDIN_BYTES} bytes`,
          ),
        );
        return;
      }
      chunks.push(chunk);
    };
    process.stdin.on('data', onData);
    process.stdin.once('end', () => {
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    process.stdin.once('error', reject);
  });
}

/**
 * The configuration's cniVersion, which an error object repeats (the spec:
 * the result's version is the configuration's), when it reads as a version.
 */
function configVersion(stdin: string): string | undefined {
  try {
    const version = (JSON.parse(stdin) as { cniVersion?: unknown } | null)?.cniVersion;
    return typeof version === 'string' && /^\d+\.\d+\.\d+$/.test(version) ? version : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The executable: env and stdin in, JSON on stdout, exit status out. Reading stdin has a bound
 * of its own (STDIN_TIMEOUT_MS); the budget is the configuration's and counts from the moment
 * the configuration is known, so a node busy starting many plugins at once (Node's own start-up
 * under CPU contention) never spends it before the configuration has said what it is.
 */
export async function main(env: CniEnvironment = process.env): Promise<void> {
  let cniVersion: string = SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.length - 1] ?? '1.1.0';
  let command: Command | undefined;
  let request: CniRequest | undefined;
  let settled = false;
  const finish = (response: CniResponse, exitNow: boolean): void => {
    if (settled) return;
    settled = true;
    for (const line of response.log) write(2, `${line}\n`);
    if (response.stdout !== undefined) write(1, `${JSON.stringify(response.stdout)}\n`);
    process.exitCode = response.status;
    // Past the budget something is still running: leave now rather than wait for it.
    if (exitNow) process.exit(response.status);
  };
  const fail = (error: unknown, exitNow = false): void => {
    const cniError =
      error instanceof CniError
        ? error
        : new CniError(
            CNI_ERRORS.IO_FAILURE,
            'flannel-guard-cni failed',
            error instanceof Error ? error.message : String(error),
          );
    finish({ status: 1, stdout: errorObject(cniVersion, cniError), log: [] }, exitNow);
  };
  /** DEL releases nothing of ours: whatever goes wrong, it must not fail the runtime's DEL. */
  const releaseAnyway = (reason: string, exitNow: boolean): void => {
    finish({ status: 0, log: [`flannel-guard-cni: DEL: nothing to release (${reason})`] }, exitNow);
  };
  const stdinOverdue = setTimeout(() => {
    const note = `stdin did not end within ${STDIN_TIMEOUT_MS} ms`;
    if (env.CNI_COMMAND === 'DEL') releaseAnyway(note, true);
    // Without the configuration there is no prevResult to pass on: the runtime may retry.
    else fail(new CniError(CNI_ERRORS.TRY_AGAIN_LATER, `flannel-guard-cni: ${note}`), true);
  }, STDIN_TIMEOUT_MS);
  const outOfBudget = (budgetMs: number): void => {
    const note = `flannel-guard-cni: ${command ?? 'command'} ran out of its ${budgetMs} ms budget`;
    if (request?.command === 'ADD') {
      const device = request.plugin.device;
      finish(
        {
          status: 0,
          stdout: request.config.prevResult,
          log: [`${note}; ${device} not checked (pod creation goes on)`],
        },
        true,
      );
    } else if (command === 'DEL' || command === 'GC') {
      finish({ status: 0, log: [note] }, true);
    } else {
      fail(new CniError(CNI_ERRORS.TRY_AGAIN_LATER, note), true);
    }
  };
  // At the budget ADD's writes stop (the signal) and it reports the partial
  // repair; a backstop answers if even that hangs. Every other command
  // answers at the budget.
  const controller = new AbortController();
  let timers: NodeJS.Timeout[] = [];
  try {
    const stdin = await readStdin();
    clearTimeout(stdinOverdue);
    cniVersion = configVersion(stdin) ?? cniVersion;
    command = checkEnvironment(env);
    request = parseRequest(command, stdin);
    cniVersion = request.cniVersion;
    const { budgetMs } = request.plugin;
    timers = [
      setTimeout(() => {
        controller.abort();
        // Only ADD has a partial result worth waiting for; the rest answer now.
        if (request?.command !== 'ADD') outOfBudget(budgetMs);
      }, budgetMs),
      setTimeout(() => {
        outOfBudget(budgetMs);
      }, budgetMs + BACKSTOP_MS),
    ];
    finish(await handle(request, controller.signal), false);
  } catch (error) {
    if (env.CNI_COMMAND === 'DEL') {
      releaseAnyway(
        error instanceof CniError
          ? `${error.message}${error.details === undefined ? '' : `: ${error.details}`}`
          : String(error),
        false,
      );
    } else {
      fail(error);
    }
  } finally {
    clearTimeout(stdinOverdue);
    for (const timer of timers) clearTimeout(timer);
  }
}

if (require.main === module) {
  if (process.env.CNI_COMMAND === undefined && process.stdin.isTTY) {
    write(
      2,
      `flannel-guard-cni ${packageVersion()}: a CNI plugin (spec ${SUPPORTED_VERSIONS.join(', ')}); run by a container runtime, not by hand\n`,
    );
  }
  void main();
}
