/**
 * The CNI semantics, once, for both ways a call arrives: the standalone plugin (a process per
 * call, main.ts) and the guard's socket (server.ts, which the shim forwards to). A call is the
 * CNI_* environment and stdin; the answer is an exit status, stdout and stderr lines. What
 * checks and repairs the VTEP is the backend: ensureVtep in the plugin's own process, the
 * guard's live state and correction path behind the socket.
 *
 *   ADD     the backend brings the VTEP to what is expected; prints prevResult unchanged
 *   CHECK   the backend reads it: error 100 when it drifted, 101 when it is missing
 *   DEL     nothing to release; succeeds (whatever goes wrong: it must not fail the runtime's DEL)
 *   STATUS  error 50 when the VTEP is missing or cannot be read
 *   GC      holds no per-attachment state; succeeds
 *   VERSION the supported spec versions
 *
 * A time budget (the configuration's `budgetMs`, counted once the configuration is read) bounds
 * every command: on ADD, when it runs out, prevResult is printed and pod creation goes on; CHECK
 * and STATUS answer error 11 (try again later). Problems during ADD are reported on stderr and do
 * not fail the pod unless `failOnError` is set.
 */
import { isSystemError } from '../core/errors';
import type { Drift } from '../ensure/ensure';
import {
  BACKSTOP_MS,
  CNI_ERRORS,
  CniError,
  SUPPORTED_VERSIONS,
  checkEnvironment,
  errorObject,
  parseRequest,
  type CniEnvironment,
  type CniRequest,
  type PluginConfig,
} from './request';

/** What a backend found (and, for ADD, did) on the VTEP. */
export interface VtepReport {
  /** The VTEP is as expected now (CHECK, STATUS: already was). */
  ok: boolean;
  /** What differed from what is expected. */
  drift: readonly Pick<Drift, 'kind' | 'subject' | 'expected' | 'observed'>[];
  /** Writes made (ADD). */
  writes: number;
  /** The budget stopped the writes part way. */
  interrupted: boolean;
  durationMs: number;
}

export interface VtepBackend {
  /**
   * ADD (`repair`): brings the VTEP to what is expected; CHECK and STATUS: reads it. Throws
   * when the VTEP cannot be read (ENODEV: it does not exist). `signal` aborts at the budget.
   */
  ensure(plugin: PluginConfig, repair: boolean, signal: AbortSignal): Promise<VtepReport>;
}

export interface CniResponse {
  /** Exit status. */
  status: number;
  /** The JSON printed on stdout (undefined: nothing). */
  stdout?: unknown;
  /** Lines for stderr. */
  log: string[];
  /** Answered at the budget while the backend was still at work (a process leaves at once). */
  overran?: true;
}

/** Drifts named in a log line or error; the rest are counted (thousands of peers). */
const DRIFTS_SHOWN = 5;

function describeDrift(report: VtepReport): string {
  const shown = report.drift
    .slice(0, DRIFTS_SHOWN)
    .map(
      (d) =>
        `${d.kind}${d.subject === undefined ? '' : ` ${d.subject}`}: expected ${d.expected}, found ${d.observed}`,
    )
    .join('; ');
  const more = report.drift.length - DRIFTS_SHOWN;
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

async function add(
  request: CniRequest,
  backend: VtepBackend,
  signal: AbortSignal,
): Promise<CniResponse> {
  const { plugin } = request;
  const log: string[] = [];
  const passOn = (): CniResponse => ({ status: 0, stdout: request.config.prevResult, log });
  try {
    const report = await backend.ensure(plugin, true, signal);
    if (report.interrupted) {
      const message = `flannel-guard-cni: ${plugin.device}: the ${plugin.budgetMs} ms budget ran out with ${report.writes} writes made: a partial repair (${describeDrift(report)})`;
      if (plugin.failOnError) {
        throw new CniError(
          CNI_ERRORS.TRY_AGAIN_LATER,
          `VTEP ${plugin.device} partly repaired`,
          message,
        );
      }
      log.push(`${message}; pod creation goes on`);
      return passOn();
    }
    if (report.writes > 0) {
      log.push(
        `flannel-guard-cni: ${plugin.device} repaired in ${report.durationMs.toFixed(1)} ms: ${describeDrift(report)}`,
      );
    }
    if (!report.ok) {
      const message = `flannel-guard-cni: ${plugin.device} still not as desired: ${describeDrift(report)}`;
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
  return passOn();
}

/**
 * Runs one command; a failure is thrown as a CniError (answered as the spec's error object).
 * `signal` aborts at the budget: ADD then stops writing and reports the partial repair.
 */
export async function handle(
  request: CniRequest,
  backend: VtepBackend,
  signal: AbortSignal,
): Promise<CniResponse> {
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
    case 'ADD':
      return add(request, backend, signal);
    case 'CHECK': {
      let report: VtepReport;
      try {
        report = await backend.ensure(plugin, false, signal);
      } catch (error) {
        throw vtepError(CNI_ERRORS.VTEP_UNAVAILABLE, plugin, error);
      }
      if (!report.ok) {
        throw new CniError(
          CNI_ERRORS.VTEP_DRIFTED,
          `VTEP ${plugin.device} drifted`,
          describeDrift(report),
        );
      }
      return { status: 0, log: [] };
    }
    case 'STATUS': {
      try {
        await backend.ensure(plugin, false, signal);
      } catch (error) {
        throw vtepError(CNI_ERRORS.NOT_AVAILABLE, plugin, error);
      }
      return { status: 0, log: [] };
    }
  }
}

/**
 * The configuration's cniVersion, which an error object repeats (the spec: the result's version
 * is the configuration's), when it reads as a version.
 */
export function configVersion(stdin: string): string | undefined {
  try {
    const version = (JSON.parse(stdin) as { cniVersion?: unknown } | null)?.cniVersion;
    return typeof version === 'string' && /^\d+\.\d+\.\d+$/.test(version) ? version : undefined;
  } catch {
    return undefined;
  }
}

/** The newest version: what an error object says when the configuration does not. */
export const NEWEST_VERSION: string = SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.length - 1] ?? '1.1.0';

/** A failure as the spec's error object on stdout, exit status 1. */
export function failure(cniVersion: string, error: unknown): CniResponse {
  const cniError =
    error instanceof CniError
      ? error
      : new CniError(
          CNI_ERRORS.IO_FAILURE,
          'flannel-guard-cni failed',
          error instanceof Error ? error.message : String(error),
        );
  return { status: 1, stdout: errorObject(cniVersion, cniError), log: [] };
}

/** DEL releases nothing of ours: whatever goes wrong, it must not fail the runtime's DEL. */
export function releaseAnyway(error: unknown): CniResponse {
  const reason =
    error instanceof CniError
      ? `${error.message}${error.details === undefined ? '' : `: ${error.details}`}`
      : typeof error === 'string'
        ? error
        : String(error);
  return { status: 0, log: [`flannel-guard-cni: DEL: nothing to release (${reason})`] };
}

/**
 * One call, answered within its budget: parses the environment and configuration, runs the
 * command on `backend`, and at the budget answers without it (ADD passes prevResult on, DEL and
 * GC succeed, the rest error 11), `overran` set. Never rejects.
 */
export async function answer(
  env: CniEnvironment,
  stdin: string,
  backend: VtepBackend,
): Promise<CniResponse> {
  let cniVersion = configVersion(stdin) ?? NEWEST_VERSION;
  let request: CniRequest;
  try {
    request = parseRequest(checkEnvironment(env), stdin);
  } catch (error) {
    return env.CNI_COMMAND === 'DEL' ? releaseAnyway(error) : failure(cniVersion, error);
  }
  cniVersion = request.cniVersion;
  const { budgetMs, device } = request.plugin;
  const controller = new AbortController();
  const note = `flannel-guard-cni: ${request.command} ran out of its ${budgetMs} ms budget`;
  const outOfBudget = (): CniResponse => {
    if (request.command === 'ADD') {
      return {
        status: 0,
        stdout: request.config.prevResult,
        log: [`${note}; ${device} not checked (pod creation goes on)`],
        overran: true,
      };
    }
    if (request.command === 'DEL' || request.command === 'GC') {
      return { status: 0, log: [note], overran: true };
    }
    return {
      ...failure(cniVersion, new CniError(CNI_ERRORS.TRY_AGAIN_LATER, note)),
      overran: true,
    };
  };
  // At the budget ADD's writes stop (the signal) and it reports the partial repair; a backstop
  // answers if even that hangs. Every other command answers at the budget.
  let timers: NodeJS.Timeout[] = [];
  const deadline = new Promise<CniResponse>((resolve) => {
    timers = [
      setTimeout(() => {
        controller.abort();
        if (request.command !== 'ADD') resolve(outOfBudget());
      }, budgetMs),
      setTimeout(() => {
        resolve(outOfBudget());
      }, budgetMs + BACKSTOP_MS),
    ];
  });
  try {
    return await Promise.race([
      handle(request, backend, controller.signal).catch((error: unknown) =>
        request.command === 'DEL' ? releaseAnyway(error) : failure(cniVersion, error),
      ),
      deadline,
    ]);
  } finally {
    for (const timer of timers) clearTimeout(timer);
  }
}
