/**
 * Reading paths a user names, which may be anything: a FIFO that never opens,
 * /dev/zero that never ends, a directory, a file in the wrong file system.
 * Nothing here blocks: files are opened non-blocking and checked by type
 * before a byte is read, and reads stop at a cap.
 */
import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  fsyncSync,
  openSync,
  readSync,
  renameSync,
  statSync,
  statfsSync,
  unlinkSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { join } from 'node:path';

import { invalidArgument, isSystemError, type SystemError, type SystemErrorFields } from './errors';

/** statfs(2) f_type of nsfs, the file system of namespace files (linux/magic.h). */
const NSFS_MAGIC = 0x6e736673;

/** The bits of st_mode chmod(2) sets. */
export const PERMISSION_BITS = 0o7777;
/** What a file is written with when nothing else is asked. */
export const DEFAULT_FILE_MODE = 0o644;

function kindOf(stat: Stats): string {
  if (stat.isDirectory()) return 'a directory';
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isCharacterDevice()) return 'a character device';
  if (stat.isBlockDevice()) return 'a block device';
  if (stat.isSocket()) return 'a socket';
  return 'not a regular file';
}

/** Extra fields for the errors (the option a path came from, say). */
type ReadFields = Omit<SystemErrorFields, 'code' | 'errno'>;
interface ReadOptions {
  missing?: 'null';
  fields?: ReadFields;
  noFollow?: true;
}

/** A file's text with its permission bits, as `undo` needs them to put it back. */
export interface FileRead {
  text: string;
  mode: number;
}

/**
 * The contents of a regular file of at most `maxBytes`, as UTF-8. Anything
 * else (missing, a FIFO, a device, a directory, too large) is an EINVAL
 * naming `what` and the reason; the open never waits for a writer. With
 * `missing: 'null'`, a file that does not exist is null instead; with
 * `noFollow`, a symbolic link at `path` is refused, not followed.
 */
export function readRegularFile(
  path: string,
  maxBytes: number,
  what: string,
  options?: { fields?: ReadFields; noFollow?: true },
): string;
export function readRegularFile(
  path: string,
  maxBytes: number,
  what: string,
  options: { missing: 'null'; fields?: ReadFields; noFollow?: true },
): string | null;
export function readRegularFile(
  path: string,
  maxBytes: number,
  what: string,
  options: ReadOptions = {},
): string | null {
  return readWithMode(path, maxBytes, what, options)?.text ?? null;
}

/** As readRegularFile, with the permission bits of the file read (from the descriptor read). */
export function readRegularFileAndMode(
  path: string,
  maxBytes: number,
  what: string,
  options?: { fields?: ReadFields; noFollow?: true },
): FileRead;
export function readRegularFileAndMode(
  path: string,
  maxBytes: number,
  what: string,
  options: { missing: 'null'; fields?: ReadFields; noFollow?: true },
): FileRead | null;
export function readRegularFileAndMode(
  path: string,
  maxBytes: number,
  what: string,
  options: ReadOptions = {},
): FileRead | null {
  return readWithMode(path, maxBytes, what, options);
}

function readWithMode(
  path: string,
  maxBytes: number,
  what: string,
  options: ReadOptions,
): FileRead | null {
  const fail = (reason: string): SystemError =>
    invalidArgument(`${what} ${path}: ${reason}`, options.fields);
  let fd: number;
  try {
    const noFollow = options.noFollow ? constants.O_NOFOLLOW : 0;
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY | noFollow);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'ENOENT' && options.missing === 'null') return null;
    if (code === 'ELOOP' && options.noFollow) throw fail('a symbolic link, not a file');
    throw fail(code === 'ENOENT' ? 'no such file' : (error as Error).message);
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw fail(`${kindOf(stat)}, not a file`);
    if (stat.size > maxBytes) throw fail(`larger than ${maxBytes} bytes`);
    // Read one byte past the cap: a file that grew meanwhile is refused, not cut.
    const buffer = Buffer.alloc(maxBytes + 1);
    let length = 0;
    for (let read = -1; read !== 0 && length < buffer.length; length += read) {
      read = readSync(fd, buffer, length, buffer.length - length, null);
    }
    if (length > maxBytes) throw fail(`larger than ${maxBytes} bytes`);
    return { text: buffer.toString('utf8', 0, length), mode: stat.mode & PERMISSION_BITS };
  } finally {
    closeSync(fd);
  }
}

/**
 * Why `path` cannot be a network namespace file, or null when it may be: it
 * must exist and live on nsfs (an `ip netns` bind mount, /proc/PID/ns/net).
 * Neither check opens the file, so a FIFO cannot hang it.
 */
export function netnsPathProblem(path: string): string | null {
  let stat;
  try {
    stat = statSync(path);
  } catch {
    return `no such network namespace (${path})`;
  }
  if (!stat.isFile() || statfsSync(path).type !== NSFS_MAGIC) {
    return `not a network namespace (${path}: ${stat.isFile() ? 'a file' : kindOf(stat)})`;
  }
  return null;
}

let temporaries = 0;

/**
 * A new file beside `dir/name`, named by this process and a counter. O_EXCL
 * makes the name unique; one left behind by an earlier process with the same
 * pid is stepped over (bounded), never opened.
 */
function createTemporary(dir: string, name: string, mode: number) {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  for (let attempt = 1; ; attempt++) {
    const temporary = join(dir, `.${name}.${process.pid}.${++temporaries}.tmp`);
    try {
      return { fd: openSync(temporary, flags, mode), temporary };
    } catch (error) {
      if (!isSystemError(error) || error.code !== 'EEXIST' || attempt === 16) throw error;
    }
  }
}

/**
 * Replaces `dir/name` with `content` atomically: written to a new temporary
 * name in the same folder (O_EXCL | O_NOFOLLOW: never through a link),
 * synced, then renamed over the target, which replaces a symlink there
 * instead of writing through it. Readers see the old file or the new one.
 * The file gets `mode` as given, not narrowed by the umask (a file put back
 * gets the bits it had). Returns the path written.
 */
export function writeFileReplacing(
  dir: string,
  name: string,
  content: string | Uint8Array,
  mode = DEFAULT_FILE_MODE,
): string {
  const target = join(dir, name);
  const { fd, temporary } = createTemporary(dir, name, mode);
  try {
    try {
      fchmodSync(fd, mode);
      const buffer = Buffer.from(content);
      for (let offset = 0; offset < buffer.length;) offset += writeSync(fd, buffer, offset);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, target);
  } catch (error) {
    unlinkSync(temporary);
    throw error;
  }
  return target;
}
