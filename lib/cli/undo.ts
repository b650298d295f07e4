/**
 * `flannel-guard undo`: takes back what the change journal (core/journal.ts) says `watch` and
 * `doctor --fix` changed: each offload feature set back to its state before, each file written
 * removed (or given back what it held), the folders made for it removed when empty, and the
 * command that re-reads them run again. Refuses while a guard watches a device it would set
 * back (the guard would turn it again); leaves a file changed since it was written. Its flags
 * are in commands.ts.
 */
import { closeSync } from 'node:fs';

import { binding } from '../core/binding';
import { isSystemError, messageOf } from '../core/errors';
import { readRegularFile } from '../core/files';
import { MAX_CONFIG_FILE_BYTES } from '../core/fsroot';
import {
  putBackFile,
  readJournal,
  writeJournal,
  type FileChange,
  type JournalRecord,
  type OffloadChange,
} from '../core/journal';
import { setFeatures } from '../core/oneshot';
import { netnsTarget } from '../core/validate';
import { EXIT_FAILURE, checkNetnsFlag } from './common';
import { UsageError, type Flags } from './flags';
import { writeOut } from './stdio';

interface UndoStep {
  /** What was (or, on a dry run, would be) done, in one line. */
  said: string;
  /** Taken back: the record leaves the journal. */
  done: boolean;
  failed: boolean;
}

function onOff(features: Readonly<Record<string, boolean>>): string {
  return Object.entries(features)
    .map(([name, on]) => `${name} ${on ? 'on' : 'off'}`)
    .join(', ');
}

/** Whether a guard holds the device's name in its namespace (guard/other-guards.ts). */
function guardWatches(record: OffloadChange): boolean {
  const target = netnsTarget(record.netns ?? undefined);
  const name = `flannel-guard/${record.device}`;
  const claim =
    target === null ? binding.claimName(name) : binding.claimName(name, target.path, target.label);
  if (claim.fd >= 0) closeSync(claim.fd); // -1: the holder's queue is full, held all the same
  return !claim.held;
}

async function undoOffload(record: OffloadChange, dryRun: boolean): Promise<UndoStep> {
  const where = `${record.device}${record.netns === null ? '' : ` (netns ${record.netns})`}`;
  if (dryRun)
    return { said: `would set ${where}: ${onOff(record.before)}`, done: false, failed: false };
  try {
    const result = await setFeatures(
      record.device,
      record.before,
      record.netns === null ? {} : { netns: record.netns },
    );
    const missed =
      result.notApplied.length > 0 ? `; not applied: ${result.notApplied.join(', ')}` : '';
    return {
      said: `${where}: ${onOff(record.before)} (as before)${missed}`,
      done: true,
      failed: missed !== '',
    };
  } catch (error) {
    if (isSystemError(error) && error.code === 'ENODEV') {
      return {
        said: `${where}: gone (a device made again has the kernel's defaults): dropped`,
        done: true,
        failed: false,
      };
    }
    return { said: `${where}: ${messageOf(error)}`, done: false, failed: true };
  }
}

async function run(argv: readonly string[]): Promise<string> {
  // Loaded here, not with the command table: `watch` then loads neither child_process nor the
  // net and stream modules under it (2.4 MiB of the guard's RSS).
  const { execFile } = await import('node:child_process');
  return new Promise((resolve) => {
    execFile(argv[0] ?? '', argv.slice(1), { timeout: 10_000 }, (error) => {
      resolve(error === null ? 'ok' : `failed (${error.message})`);
    });
  });
}

async function undoFile(record: FileChange, dryRun: boolean): Promise<UndoStep[]> {
  let now: string | null;
  try {
    // Not through a link: a link there now is not the file written.
    now = readRegularFile(record.path, MAX_CONFIG_FILE_BYTES, 'file', {
      missing: 'null',
      noFollow: true,
    });
  } catch (error) {
    return [{ said: `${record.path}: ${messageOf(error)}`, done: false, failed: true }];
  }
  if (now !== record.written) {
    return [
      {
        said: `left ${record.path}: ${now === null ? 'removed' : 'changed'} since flannel-guard wrote it`,
        done: true,
        failed: false,
      },
    ];
  }
  const verb = record.before === null ? 'remove' : 'put back what it held in';
  if (dryRun) {
    return [
      { said: `would ${verb} ${record.path}`, done: false, failed: false },
      ...record.createdDirs.map((dir) => ({
        said: `would remove the folder ${dir} (if empty)`,
        done: false,
        failed: false,
      })),
      ...(record.reload === null
        ? []
        : [{ said: `would run ${record.reload.join(' ')}`, done: false, failed: false }]),
    ];
  }
  let removedDirs: string[];
  try {
    removedDirs = putBackFile(record);
  } catch (error) {
    return [{ said: `${record.path}: ${messageOf(error)}`, done: false, failed: true }];
  }
  const steps: UndoStep[] = [
    {
      said: `${verb === 'remove' ? 'removed' : 'put back what it held in'} ${record.path}`,
      done: true,
      failed: false,
    },
    ...removedDirs.map((dir) => ({ said: `removed the folder ${dir}`, done: true, failed: false })),
  ];
  if (record.reload !== null) {
    steps.push({
      said: `ran ${record.reload.join(' ')}: ${await run(record.reload)}`,
      done: true,
      failed: false,
    });
  }
  return steps;
}

/** Whether a record is this namespace's (a file written is every namespace's). */
export function concerns(record: JournalRecord, netns: string | undefined): boolean {
  return record.kind === 'file' || record.netns === (netns ?? null);
}

/** What `status` shows of the journal: this namespace's records, or why they cannot be read. */
export interface RecordedChanges {
  /** Null: --state-dir off. */
  stateDir: string | null;
  records: JournalRecord[];
  error: string | null;
}

export function recordedChanges(stateDir: string, netns: string | undefined): RecordedChanges {
  if (stateDir === 'off') return { stateDir: null, records: [], error: null };
  try {
    const records = readJournal(stateDir).filter((record) => concerns(record, netns));
    return { stateDir, records, error: null };
  } catch (error) {
    return { stateDir, records: [], error: messageOf(error) };
  }
}

export async function undo(flags: Flags): Promise<number> {
  const netns = flags.value('netns');
  checkNetnsFlag(netns);
  const dir = flags.required('state-dir');
  if (dir === 'off') throw new UsageError('--state-dir off: undo reads the journal there');
  const dryRun = flags.has('dry-run');
  let records: JournalRecord[];
  try {
    records = readJournal(dir);
  } catch (error) {
    writeOut(`undo: ${messageOf(error)}\n`);
    return EXIT_FAILURE;
  }
  const selected = records.filter((record) => concerns(record, netns));
  const watched = selected.filter(
    (record): record is OffloadChange => record.kind === 'offload' && guardWatches(record),
  );
  if (watched.length > 0) {
    writeOut(
      `undo: a guard watches ${watched.map((r) => r.device).join(', ')}: stop it first (it would turn them again); nothing changed\n`,
    );
    return EXIT_FAILURE;
  }
  const lines: string[] = [];
  const undone = new Set<JournalRecord>();
  let failed = false;
  for (const record of selected) {
    const steps =
      record.kind === 'offload'
        ? [await undoOffload(record, dryRun)]
        : await undoFile(record, dryRun);
    for (const step of steps) lines.push(step.said);
    if (steps.some((step) => step.failed)) failed = true;
    else if (steps.every((step) => step.done)) undone.add(record);
  }
  if (!dryRun && undone.size > 0)
    writeJournal(
      dir,
      records.filter((r) => !undone.has(r)),
    );
  if (lines.length === 0) lines.push('nothing to take back');
  writeOut(
    flags.has('json')
      ? `${JSON.stringify({ dryRun, steps: lines, left: records.length - undone.size })}\n`
      : lines.map((line) => `undo: ${line}\n`).join(''),
  );
  return failed ? EXIT_FAILURE : 0;
}
