/**
 * flannel-guard doctor: names the cause of "pods on different nodes can't talk, but ping works"
 * in seconds, and with `fix` prevents or repairs what it can, reporting every change it made.
 */
import { execFile } from 'node:child_process';

import { existsSync } from 'node:fs';
import { dirname } from 'node:path';

import {
  ensureVtep,
  type EnsureAction,
  type EnsurePlannedAction,
  type EnsureVtepResult,
} from '../ensure/ensure';
import { putBackFile, readJournal, recordFile, recordOffloads } from '../core/journal';
import { invalidArgument, messageOf } from '../core/errors';
import { readRegularFileAndMode, type FileRead } from '../core/files';
import { MAX_CONFIG_FILE_BYTES } from '../core/fsroot';
import { NET_ADDR_RANDOM } from '../core/constants';
import { absolutePathOption, booleanOption, rejectUnknownOptions } from '../core/options';
import {
  CHECK_IDS,
  type CheckId,
  type CheckResult,
  type DoctorInput,
  type Gathered,
  type Verdict,
} from './check-types';
import { runChecks } from './checks';
import { flannelLinkFileContent, networkManagerDropIn } from './config-checks';
import { gather } from './gather';
import { evaluateLinkFiles, macEffect, type LinkFile } from '../udev/link-files';

export { CHECK_IDS };
export type { CheckId, CheckResult, DoctorInput, Verdict };

export const DOCTOR_SCHEMA = 'flannel-guard/doctor/v1';

export interface DoctorOptions extends DoctorInput {
  /** Prevent and repair what can be: the .link file, the MAC, neighbours, the offload policy. */
  fix?: boolean;
  /** With `fix`: the plan only, each file, command and device write `fix` would make; nothing changed. */
  dryRun?: boolean;
  /**
   * Run `udevadm control --reload` after writing a .link file (default: when the root is '/',
   * i.e. the files are the running system's).
   */
  reloadUdev?: boolean;
  /** Run `nmcli general reload conf` after writing the NetworkManager drop-in (same default). */
  reloadNetworkManager?: boolean;
  /** Where `fix` notes what it changed, with what was there before (`flannel-guard undo`). */
  stateDir?: string;
}

export type DoctorChange =
  | { kind: 'write-file'; path: string; content: string }
  | { kind: 'command'; argv: string[]; status: number | null; output: string }
  | { kind: 'device'; device: string; action: EnsureAction | EnsurePlannedAction }
  | { kind: 'not-fixed'; check: CheckId; device: string | null; reason: string };

export interface DoctorReport {
  schema: typeof DOCTOR_SCHEMA;
  root: string;
  netns: string | null;
  kernel: string;
  /** The managed devices found. */
  devices: string[];
  /** The worst verdict. */
  verdict: Verdict;
  counts: Record<Verdict, number>;
  /** After the fixes when `fix` was set. */
  checks: CheckResult[];
  /** Whether fixes were attempted. */
  fixed: boolean;
  /** --fix --dry-run: `changes` is the plan, and nothing was changed. */
  dryRun: boolean;
  /** What --fix changed (in order), and what it could not fix. */
  changes: DoctorChange[];
  /** Verdicts before the fixes (null without --fix). */
  before: { id: CheckId; device: string | null; verdict: Verdict }[] | null;
}

function worst(checks: readonly CheckResult[]): Verdict {
  if (checks.some((c) => c.verdict === 'fail')) return 'fail';
  if (checks.some((c) => c.verdict === 'warn')) return 'warn';
  return 'ok';
}

function run(argv: string[]): Promise<{ status: number | null; output: string }> {
  return new Promise((resolve) => {
    execFile(
      argv[0] ?? '',
      argv.slice(1),
      { timeout: 10_000, encoding: 'utf8' },
      (error, stdout, stderr) => {
        const code = (error as (Error & { code?: unknown }) | null)?.code;
        resolve({
          status: error ? (typeof code === 'number' ? code : null) : 0,
          output:
            `${stdout}${stderr}`.trim() || (error && typeof code !== 'number' ? error.message : ''),
        });
      },
    );
  });
}

/** A .link file name that sorts before every file that would rewrite the MAC. */
function chooseLinkName(gathered: Gathered, offending: readonly LinkFile[]): string | null {
  const taken = new Map(gathered.linkFiles.map((file) => [file.name, file]));
  const content = flannelLinkFileContent(gathered.globs);
  for (const name of [
    '10-flannel.link',
    '00-flannel.link',
    '00-00-flannel.link',
    '0-flannel.link',
  ]) {
    if (!offending.every((file) => name < file.name)) continue;
    const existing = taken.get(name);
    if (existing && existing.path === `/etc/systemd/network/${name}`) {
      if (gathered.fs.readText(existing.path) !== content) continue;
    }
    return name;
  }
  return null;
}

/** Where the fixes go: the changes made (or, on a dry run, planned). */
interface FixLog {
  changes: DoctorChange[];
  dryRun: boolean;
  /** The change journal's folder (undefined: none kept). */
  journal: string | undefined;
}

async function fixLinkFiles(
  gathered: Gathered,
  checks: CheckResult[],
  log: FixLog,
  reload: boolean,
): Promise<void> {
  const bad = checks.filter((c) => c.id === 'link-files' && c.verdict !== 'ok');
  if (bad.length === 0) return;
  const offending = new Set<LinkFile>();
  for (const subject of gathered.subjects) {
    const evaluation = evaluateLinkFiles(gathered.linkFiles, subject, gathered.host);
    for (const file of [
      ...evaluation.possible,
      ...(evaluation.applied ? [evaluation.applied] : []),
    ]) {
      if (macEffect(file).rewrites) offending.add(file);
    }
  }
  const name = chooseLinkName(gathered, [...offending]);
  if (name === null) {
    log.changes.push({
      kind: 'not-fixed',
      check: 'link-files',
      device: null,
      reason: `every name flannel-guard would use sorts after ${[...offending].map((f) => f.path).join(', ')}: edit that file (MACAddressPolicy=none for flannel*) instead`,
    });
    return;
  }
  const file = {
    path: `/etc/systemd/network/${name}`,
    content: flannelLinkFileContent(gathered.globs),
  };
  await writeConfigFile(
    gathered,
    'link-files',
    file,
    reload ? ['udevadm', 'control', '--reload'] : null,
    log,
  );
}

/** NetworkManager: the unmanaged-devices drop-in only (never a profile of the user's). */
async function fixNetworkManager(
  gathered: Gathered,
  checks: CheckResult[],
  log: FixLog,
  reload: boolean,
): Promise<void> {
  if (!checks.some((c) => c.id === 'networkmanager' && c.verdict !== 'ok')) return;
  const reloadArgv = reload ? ['nmcli', 'general', 'reload', 'conf'] : null;
  await writeConfigFile(
    gathered,
    'networkmanager',
    networkManagerDropIn(gathered.globs),
    reloadArgv,
    log,
  );
}

/**
 * What stands at `real` (null: nothing), as `undo` puts it back. What it could not put back as it
 * was (a symbolic link, a FIFO, a folder, a file over the cap) throws: it is left as it is.
 */
function replaceable(real: string): FileRead | null {
  try {
    return readRegularFileAndMode(real, MAX_CONFIG_FILE_BYTES, 'file', {
      missing: 'null',
      noFollow: true,
    });
  } catch (error) {
    throw new Error(`${messageOf(error)}: undo could not put it back`, { cause: error });
  }
}

/**
 * Writes FILE under the root for CHECK's fix and, when given, runs the command that re-reads it.
 * With a journal, the write is noted there with what it replaced; a write that cannot be noted is
 * taken back at once (a change undo would not know of is not made).
 */
async function writeConfigFile(
  gathered: Gathered,
  check: CheckId,
  file: { path: string; content: string },
  reloadArgv: string[] | null,
  log: FixLog,
): Promise<void> {
  const { changes } = log;
  let real: string;
  try {
    const target = gathered.fs.writeTarget(file.path);
    const before = replaceable(target.realPath);
    const createdDirs = missingDirs(target.dir);
    real = log.dryRun ? target.realPath : gathered.fs.writeFile(file.path, file.content);
    if (!log.dryRun && log.journal !== undefined) {
      const change = {
        path: real,
        before: before?.text ?? null,
        beforeMode: before?.mode ?? null,
        createdDirs,
      };
      try {
        recordFile(log.journal, {
          kind: 'file',
          ...change,
          written: file.content,
          reload: reloadArgv,
        });
      } catch (error) {
        putBackFile(change);
        throw error;
      }
    }
  } catch (error) {
    changes.push({
      kind: 'not-fixed',
      check,
      device: null,
      reason: `cannot write ${file.path}: ${messageOf(error)}`,
    });
    return;
  }
  changes.push({ kind: 'write-file', path: real, content: file.content });
  if (reloadArgv === null) return;
  const outcome = log.dryRun ? { status: null, output: '' } : await run(reloadArgv);
  changes.push({ kind: 'command', argv: reloadArgv, ...outcome });
}

async function fixDevices(gathered: Gathered, input: DoctorOptions, log: FixLog): Promise<void> {
  const { changes } = log;
  for (const device of gathered.devices) {
    if (device.link.kind !== 'vxlan') continue;
    try {
      // A journal that does not read would not take the change either: none is made.
      if (log.journal !== undefined && !log.dryRun) readJournal(log.journal);
      const result = await ensureVtep({
        ...(input.netns === undefined ? {} : { netns: input.netns }),
        device: device.link.name,
        ...(device.publishedMac === null ? {} : { mac: device.publishedMac }),
        peers: device.peers,
        offload: input.offload ?? gathered.offload,
        pin: device.addrAssignType === NET_ADDR_RANDOM,
        ...(device.addrAssignType === null ? {} : { addrAssignType: device.addrAssignType }),
        dryRun: log.dryRun,
      });
      for (const action of log.dryRun ? result.planned : result.actions)
        changes.push({ kind: 'device', device: device.link.name, action });
      if (log.journal !== undefined) journalOffloads(log.journal, input.netns ?? null, result);
      for (const drift of result.drift.filter((d) => !d.fixable)) {
        changes.push({
          kind: 'not-fixed',
          check: drift.kind === 'offload' ? 'offload' : 'vtep-mac',
          device: device.link.name,
          reason: `${drift.subject ?? drift.kind} is fixed at ${drift.observed} by the driver`,
        });
      }
    } catch (error) {
      changes.push({
        kind: 'not-fixed',
        check: 'vtep-mac',
        device: device.link.name,
        reason: messageOf(error),
      });
    }
  }
}

/** The folders of `dir` (a real path) that do not exist yet, outermost first. */
function missingDirs(dir: string): string[] {
  const missing: string[] = [];
  for (let current = dir; !existsSync(current); current = dirname(current)) {
    missing.unshift(current);
  }
  return missing;
}

/** Notes the offload features a repair changed, with their states before. */
function journalOffloads(dir: string, netns: string | null, result: EnsureVtepResult): void {
  for (const action of result.actions) {
    if (action.action !== 'set-offload') continue;
    const before: Record<string, boolean> = {};
    for (const [name, active] of Object.entries(action.active)) {
      const found = result.found.offloads[name];
      if (typeof found === 'boolean' && found !== active) before[name] = found;
    }
    for (const change of action.sideEffects) before[change.name] = change.before;
    if (Object.keys(before).length > 0) recordOffloads(dir, netns, action.device, before);
  }
}

/** Every name DoctorOptions declares: anything else is a caller's mistake (EINVAL). */
const OPTION_NAMES = [
  'root',
  'netns',
  'interfaces',
  'mac',
  'source',
  'peers',
  'offload',
  'kernelRelease',
  'probe',
  'passive',
  'fix',
  'dryRun',
  'reloadUdev',
  'reloadNetworkManager',
  'stateDir',
  'cluster',
] as const satisfies readonly (keyof DoctorOptions)[];

/**
 * Runs the checks and, with `fix`, the repairs; never throws for what it finds (a wrong
 * option is EINVAL before anything is read).
 */
export async function runDoctor(options: DoctorOptions = {}): Promise<DoctorReport> {
  rejectUnknownOptions(options, OPTION_NAMES, 'runDoctor');
  if (options.root !== undefined) absolutePathOption(options.root, 'root');
  const fix = booleanOption(options.fix, 'fix', false);
  const dryRun = booleanOption(options.dryRun, 'dryRun', false);
  booleanOption(options.passive, 'passive', false);
  if (dryRun && !fix)
    throw invalidArgument('dryRun plans the fixes: it needs fix', { option: 'dryRun' });
  const input: DoctorOptions = options;
  let gathered = await gather(input);
  let checks = await runChecks(gathered);
  const changes: DoctorChange[] = [];
  let before: DoctorReport['before'] = null;
  if (fix) {
    const live = gathered.fs.root === '/';
    const reloadUdev = booleanOption(options.reloadUdev, 'reloadUdev', live);
    const reloadNm = booleanOption(options.reloadNetworkManager, 'reloadNetworkManager', live);
    const journal =
      options.stateDir === undefined ? undefined : absolutePathOption(options.stateDir, 'stateDir');
    const log: FixLog = { changes, dryRun, journal };
    await fixLinkFiles(gathered, checks, log, reloadUdev);
    await fixNetworkManager(gathered, checks, log, reloadNm);
    await fixDevices(gathered, input, log);
    if (!dryRun) {
      before = checks.map((c) => ({ id: c.id, device: c.device, verdict: c.verdict }));
      gathered = await gather(input);
      checks = await runChecks(gathered);
    }
  }
  const counts: Record<Verdict, number> = { ok: 0, warn: 0, fail: 0 };
  for (const check of checks) counts[check.verdict] += 1;
  return {
    schema: DOCTOR_SCHEMA,
    root: gathered.fs.root,
    netns: options.netns ?? null,
    kernel: gathered.kernel,
    devices: gathered.devices.map((d) => d.link.name),
    verdict: worst(checks),
    counts,
    checks,
    fixed: fix && !dryRun,
    dryRun,
    changes,
    before,
  };
}
