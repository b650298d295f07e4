/**
 * Installing the CNI shim on a node as the ecosystem's installers do (flannel's, Multus's,
 * Istio's): the executable copied into the runtime's bin folder, written beside and renamed so
 * that a runtime never executes half a file; and, opted into, flannel-guard's entry added as the
 * last plugin of the primary network configuration list (the first in the runtime's order: the
 * flannel one), put back whenever flannel's installer rewrites that file, and taken out again.
 * A file that is not a list, or not JSON, is left alone and said.
 */
import { readdirSync, readFileSync, unlinkSync, watch, type FSWatcher } from 'node:fs';
import { basename, dirname, join } from 'node:path';

import { isSystemError } from '../core/errors';
import { readRegularFileAndMode, writeFileReplacing, type FileRead } from '../core/files';
import { SHIM_TYPE, withShim, withoutShim } from './conflist';

const SHIM_NAME = 'flannel-guard-cni';
const MAX_SHIM_BYTES = 8 * 1024 * 1024;
const MAX_CONFLIST_BYTES = 1024 * 1024;
/** The files a runtime reads as network configurations (libcni's ConfFiles), in its order. */
const CONFIG_EXTENSIONS = ['.conf', '.conflist', '.json'];
/** How often the folder is read again, should a change notification be lost. */
export const RECHECK_MS = 30_000;

/** Copies the shim into `binDir` (unchanged: nothing written). Throws with nothing half-written. */
export function installShim(source: string, binDir: string): 'installed' | 'unchanged' {
  const bytes = readFileSync(source);
  if (bytes.length > MAX_SHIM_BYTES) throw new Error(`${source}: not the shim (too large)`);
  const target = join(binDir, SHIM_NAME);
  try {
    if (readFileSync(target).equals(bytes)) return 'unchanged';
  } catch (error) {
    if (!isSystemError(error) || error.code !== 'ENOENT') throw error;
  }
  writeFileReplacing(binDir, SHIM_NAME, bytes, 0o755);
  return 'installed';
}

export function removeShim(binDir: string): boolean {
  try {
    unlinkSync(join(binDir, SHIM_NAME));
    return true;
  } catch (error) {
    if (isSystemError(error) && error.code === 'ENOENT') return false;
    throw error;
  }
}

/** The network configuration the runtime uses: the first of the folder's, in its order. */
export function primaryConfig(confDir: string): string | null {
  const names = readdirSync(confDir)
    .filter((name) => CONFIG_EXTENSIONS.some((extension) => name.endsWith(extension)))
    .filter((name) => !name.startsWith('.'))
    .sort();
  const first = names[0];
  return first === undefined ? null : join(confDir, first);
}

export interface ConflistChange {
  /** The file looked at (null: the folder holds none). */
  file: string | null;
  result: 'added' | 'present' | 'removed' | 'absent' | 'refused';
  reason?: string;
}

/** What an edit of the list's text gives: its outcome, and the new text when there is one. */
type Edit = Omit<ConflistChange, 'file'> & { text?: string };

function change(confDir: string, edit: (text: string) => Edit): ConflistChange {
  const file = primaryConfig(confDir);
  if (file === null)
    return { file, result: 'refused', reason: 'no network configuration there yet' };
  if (!file.endsWith('.conflist')) {
    return { file, result: 'refused', reason: 'not a configuration list (.conflist)' };
  }
  let read: FileRead;
  try {
    read = readRegularFileAndMode(file, MAX_CONFLIST_BYTES, 'network configuration');
  } catch (error) {
    return {
      file,
      result: 'refused',
      reason: error instanceof Error ? error.message : String(error),
    };
  }
  const { text: edited, ...outcome } = edit(read.text);
  if (edited !== undefined) writeFileReplacing(dirname(file), basename(file), edited, read.mode);
  return { ...outcome, file };
}

/** Adds flannel-guard's entry (`entry`'s fields beside its type) as the list's last plugin. */
export function addToConflist(
  confDir: string,
  entry: Readonly<Record<string, unknown>> = {},
): ConflistChange {
  return change(confDir, (text) => {
    const edit = withShim(text, { type: SHIM_TYPE, ...entry });
    if (edit.kind === 'insert') return { result: 'added', text: edit.text };
    if (edit.kind === 'present') return { result: 'present' };
    return { result: 'refused', reason: edit.reason };
  });
}

/** Takes flannel-guard's entry out again: the file as its author wrote it. */
export function removeFromConflist(confDir: string): ConflistChange {
  return change(confDir, (text) => {
    const without = withoutShim(text);
    return without === null ? { result: 'absent' } : { result: 'removed', text: without };
  });
}

/**
 * Keeps the entry in the primary list: at once, at every change in the folder (flannel's
 * installer writing its file again), and every RECHECK_MS. `report` hears each outcome that is
 * not 'present'. Stop with the returned function.
 */
export function keepInConflist(
  confDir: string,
  entry: Readonly<Record<string, unknown>>,
  report: (change: ConflistChange) => void,
): () => void {
  let pending: NodeJS.Timeout | undefined;
  const check = (): void => {
    pending = undefined;
    let outcome: ConflistChange;
    try {
      outcome = addToConflist(confDir, entry);
    } catch (error) {
      outcome = {
        file: null,
        result: 'refused',
        reason: error instanceof Error ? error.message : String(error),
      };
    }
    if (outcome.result !== 'present') report(outcome);
  };
  // A burst of changes (a file written in parts, then renamed) is answered once.
  const soon = (): void => {
    pending ??= setTimeout(check, 50);
  };
  const watcher: FSWatcher = watch(confDir, soon);
  watcher.on('error', soon);
  const timer = setInterval(check, RECHECK_MS);
  check();
  return () => {
    watcher.close();
    clearInterval(timer);
    if (pending !== undefined) clearTimeout(pending);
  };
}
