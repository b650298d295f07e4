/**
 * What flannel-guard changed on a node that outlives it, with what was there before: the offload
 * features the guard and `doctor --fix` turned, per namespace and device, and the files
 * `doctor --fix` wrote (what they held before, the folders made for them, the command that
 * re-reads them). One file in the state folder (default /run/flannel-guard, a tmpfs: gone at
 * reboot, as the devices' offloads are; a file written to /etc outlives it, and the README's
 * table says how to remove one by hand). `flannel-guard undo` takes them back.
 *
 * The first value seen before a change is the one kept: a device the guard turned off again
 * after its re-creation keeps its first "before". Untrusted on reading: bounded, strictly
 * validated, refused whole when anything in it is wrong.
 */
import { mkdirSync, rmdirSync, unlinkSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

import { invalidArgument } from './errors';
import { DEFAULT_FILE_MODE, PERMISSION_BITS, readRegularFile, writeFileReplacing } from './files';

export const JOURNAL_NAME = 'changes.json';
const JOURNAL_VERSION = 1;
const MAX_JOURNAL_BYTES = 4 * 1024 * 1024;
const MAX_RECORDS = 4096;

export interface OffloadChange {
  kind: 'offload';
  /** The namespace as the guard was given it (`--netns`), null for its own. */
  netns: string | null;
  device: string;
  /** Each feature's state before flannel-guard first changed it. */
  before: Record<string, boolean>;
}

export interface FileChange {
  kind: 'file';
  /** The real path written. */
  path: string;
  /** What it held before (null: it did not exist). */
  before: string | null;
  /** Its permission bits before (null: it did not exist; absent from older journals: 0644). */
  beforeMode: number | null;
  /** What was written: undo leaves a file someone changed since. */
  written: string;
  /** Folders made for it, outermost first. */
  createdDirs: string[];
  /** The command that makes its reader read it again (null: none was run). */
  reload: string[] | null;
}

export type JournalRecord = OffloadChange | FileChange;

function fail(path: string, reason: string): never {
  throw invalidArgument(`change journal ${path}: ${reason}`);
}

const isPermissionBits = (value: unknown): value is number =>
  Number.isInteger(value) && (value as number) >= 0 && (value as number) <= PERMISSION_BITS;

function isStringList(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((item) => typeof item === 'string');
}

function parseRecord(value: unknown, path: string): JournalRecord {
  const record = value as Record<string, unknown> | null;
  if (typeof record !== 'object' || record === null) fail(path, 'a record is not an object');
  if (record.kind === 'offload') {
    const { netns, device, before } = record;
    if (netns !== null && typeof netns !== 'string') fail(path, 'netns');
    if (typeof device !== 'string' || device === '') fail(path, 'device');
    if (typeof before !== 'object' || before === null || Array.isArray(before)) {
      fail(path, 'before');
    }
    const features: Record<string, boolean> = {};
    for (const [name, on] of Object.entries(before as Record<string, unknown>)) {
      if (typeof on !== 'boolean') fail(path, `${name} is not on/off`);
      features[name] = on;
    }
    return { kind: 'offload', netns, device, before: features };
  }
  if (record.kind === 'file') {
    const { path: file, before, written, createdDirs, reload } = record;
    if (typeof file !== 'string' || !file.startsWith('/')) fail(path, 'path');
    if (before !== null && typeof before !== 'string') fail(path, 'before');
    // Absent from journals written before it was noted: such files were put back as 0644.
    const { beforeMode = before === null ? null : DEFAULT_FILE_MODE } = record;
    if (before === null ? beforeMode !== null : !isPermissionBits(beforeMode)) {
      fail(path, 'beforeMode');
    }
    if (typeof written !== 'string') fail(path, 'written');
    if (!isStringList(createdDirs)) fail(path, 'createdDirs');
    if (reload !== null && !isStringList(reload)) fail(path, 'reload');
    return {
      kind: 'file',
      path: file,
      before,
      beforeMode: beforeMode as number | null,
      written,
      createdDirs,
      reload,
    };
  }
  return fail(path, `a record of kind ${JSON.stringify(record.kind)}`);
}

/** The journal's records; none when there is no journal. Throws EINVAL when it is bad. */
export function readJournal(dir: string): JournalRecord[] {
  const path = join(dir, JOURNAL_NAME);
  const text = readRegularFile(path, MAX_JOURNAL_BYTES, 'change journal', { missing: 'null' });
  if (text === null) return [];
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    fail(path, 'not JSON');
  }
  const { version, records } = (document ?? {}) as { version?: unknown; records?: unknown };
  if (version !== JOURNAL_VERSION) fail(path, `version ${JSON.stringify(version)}`);
  if (!Array.isArray(records) || records.length > MAX_RECORDS) fail(path, 'records');
  return records.map((record) => parseRecord(record, path));
}

/**
 * Replaces the journal with `records` (none: an empty journal). A journal that readJournal would
 * refuse (too many records, too many bytes) is not written: EINVAL, and the one there stays.
 */
export function writeJournal(dir: string, records: readonly JournalRecord[]): void {
  const path = join(dir, JOURNAL_NAME);
  if (records.length > MAX_RECORDS) fail(path, `more than ${MAX_RECORDS} records`);
  const text = `${JSON.stringify({ version: JOURNAL_VERSION, records }, null, 1)}\n`;
  if (Buffer.byteLength(text) > MAX_JOURNAL_BYTES) fail(path, `over ${MAX_JOURNAL_BYTES} bytes`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeFileReplacing(dir, JOURNAL_NAME, text, 0o600);
}

const sameOffload = (record: JournalRecord, netns: string | null, device: string): boolean =>
  record.kind === 'offload' && record.netns === netns && record.device === device;

/** Notes features' states before a change; a feature already noted keeps its first value. */
export function recordOffloads(
  dir: string,
  netns: string | null,
  device: string,
  before: Readonly<Record<string, boolean>>,
): void {
  const records = readJournal(dir);
  const found = records.find((record) => sameOffload(record, netns, device));
  const known = found?.kind === 'offload' ? found.before : {};
  const added = Object.entries(before).filter(([name]) => !(name in known));
  if (added.length === 0) return;
  const merged: OffloadChange = {
    kind: 'offload',
    netns,
    device,
    before: { ...known, ...Object.fromEntries(added) },
  };
  writeJournal(dir, [...records.filter((record) => record !== found), merged]);
}

/** Notes a file written; a file already noted keeps what it held first and the folders made. */
export function recordFile(dir: string, change: FileChange): void {
  const records = readJournal(dir);
  const found = records.find((record) => record.kind === 'file' && record.path === change.path);
  const first = found?.kind === 'file' ? found : change;
  const merged: FileChange = {
    ...change,
    before: first.before,
    beforeMode: first.beforeMode,
    createdDirs: first.createdDirs,
  };
  writeJournal(dir, [...records.filter((record) => record !== found), merged]);
}

/**
 * Puts back what a file change replaced: the file removed (nothing was there) or given back what
 * it held with the permission bits it had, then the folders made for it removed while empty,
 * innermost first. Returns the folders removed; throws when the file cannot be put back.
 */
export function putBackFile(
  change: Pick<FileChange, 'path' | 'before' | 'beforeMode' | 'createdDirs'>,
): string[] {
  const { path, before, beforeMode } = change;
  if (before === null) unlinkSync(path);
  else writeFileReplacing(dirname(path), basename(path), before, beforeMode ?? DEFAULT_FILE_MODE);
  const removed: string[] = [];
  for (const dir of [...change.createdDirs].reverse()) {
    try {
      rmdirSync(dir);
    } catch {
      break; // not empty (something else lives there now): it stays, and so do its parents
    }
    removed.push(dir);
  }
  return removed;
}
