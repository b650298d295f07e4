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
import type { PeerExpectation } from '../ensure/peers';
import { readRegularFile } from '../core/files';
import { isSystemError } from '../core/errors';
import { packageVersion } from '../core/package-version';
import {
  BACKSTOP_MS,
  CNI_ERRORS,
  CniError,
  MAX_EXPECT_FILE_BYTES,
  MAX_STDIN_BYTES,
  STDIN_TIMEOUT_MS,
  SUPPORTED_VERSIONS,
  checkEnvironment,
  errorObject,
  parsePluginConfig,
  parseRequest,
  type CniEnvironment,
  type CniRequest,
  type Command,
  type PluginConfig,
} from './request';

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
