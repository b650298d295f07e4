/**
 * Configuration files under a root directory (`/` on a node, a temporary tree in tests), listed
 * the way systemd's conf_files_list() does it: the same file name in a directory of higher
 * priority replaces the others, and a file that is empty or a symlink to /dev/null masks the
 * name altogether.
 */
import { lstatSync, mkdirSync, readdirSync, readlinkSync, statSync } from 'node:fs';
import { isAbsolute, join, posix } from 'node:path';

import { DEFAULT_FILE_MODE, readRegularFile, writeFileReplacing } from './files';

/**
 * Bound of one configuration file's size, read or replaced by `doctor --fix` (the largest .link or
 * rules file is a few KiB).
 */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

/** Directories of systemd .link files, highest priority first (CONF_PATHS("systemd/network")). */
export const NETWORK_DIRS = [
  '/etc/systemd/network',
  '/run/systemd/network',
  '/usr/local/lib/systemd/network',
  '/usr/lib/systemd/network',
  '/lib/systemd/network',
] as const;

/** Directories of udev rules, highest priority first. */
export const UDEV_RULES_DIRS = [
  '/etc/udev/rules.d',
  '/run/udev/rules.d',
  '/usr/local/lib/udev/rules.d',
  '/usr/lib/udev/rules.d',
  '/lib/udev/rules.d',
] as const;

export interface ConfFile {
  /** Base name, the identity that masks. */
  name: string;
  /** The path as the system sees it (without the root prefix). */
  path: string;
  /** Where it is read from (root prefix included). */
  realPath: string;
  /** Empty or a symlink to /dev/null: the name is disabled. */
  masked: boolean;
  /**
   * Not a file that can be read (a dangling symlink, a folder): udev 252
   * lists names without looking at them (conf_files_list() without flags), so
   * it still replaces the lower files of its name, and is then skipped.
   */
  unreadable: boolean;
  /** Unreadable because nothing is there (a dangling link), which udev's parser shrugs off. */
  missing: boolean;
  /** Files of the same name in lower-priority directories, which this one replaces. */
  shadows: string[];
}

/** A root-relative view of the file system. */
export class FsRoot {
  constructor(readonly root: string) {}

  /** The real path of a system path under the root. */
  real(path: string): string {
    return this.root === '/' ? path : join(this.root, path);
  }

  exists(path: string): boolean {
    try {
      lstatSync(this.real(path));
      return true;
    } catch {
      return false;
    }
  }

  isDirectory(path: string): boolean {
    try {
      const real = this.resolve(path);
      return real !== null && statSync(real).isDirectory();
    } catch {
      return false;
    }
  }

  /**
   * The real path of `path`, every symlink on the way resolved inside the root (a tree copied
   * from a node keeps absolute links such as /lib -> usr/lib or foo.link -> /dev/null).
   * '/dev/null' when it leads there; null for a loop of links, which must not be handed to the
   * system to follow (an absolute link would lead out of the root).
   */
  resolve(path: string): string | null {
    const pending = path.split('/').filter((part) => part !== '' && part !== '.');
    const done: string[] = [];
    for (let hops = 0; pending.length > 0;) {
      const part = pending.shift() ?? '';
      if (part === '..') {
        done.pop();
        continue;
      }
      const current = `/${[...done, part].join('/')}`;
      let target: string | null = null;
      try {
        if (lstatSync(this.real(current)).isSymbolicLink())
          target = readlinkSync(this.real(current));
      } catch {
        /* missing: keep the name */
      }
      if (target === null) {
        done.push(part);
        continue;
      }
      hops += 1;
      if (hops > 40) return null; // ELOOP, as the kernel's limit
      if (target === '/dev/null' && pending.length === 0) return '/dev/null';
      const parts = target.split('/').filter((p) => p !== '' && p !== '.');
      if (isAbsolute(target)) done.length = 0;
      pending.unshift(...parts);
    }
    const resolved = `/${done.join('/')}`;
    return resolved === '/dev/null' ? resolved : this.real(resolved);
  }

  /**
   * Writes `content` to the system path `path` without ever following a link
   * out of the root: the folder is resolved inside the root (as for reading)
   * and made one level at a time, each checked to be a real folder; the file
   * is written to a new temporary name beside it (O_EXCL | O_NOFOLLOW) and
   * renamed over the target, which replaces a symlink there instead of
   * writing through it. Returns the real path written.
   */
  writeFile(path: string, content: string, mode = DEFAULT_FILE_MODE): string {
    const { dir, name } = this.writeTarget(path);
    return writeFileReplacing(this.#makeDirs(dir), name, content, mode);
  }

  /** Where `writeFile(path)` writes: the real folder (made then if missing) and the name. */
  writeTarget(path: string): { dir: string; name: string; realPath: string } {
    const dir = posix.dirname(path);
    const name = posix.basename(path);
    const real = this.resolve(dir);
    if (real === null) throw new Error(`${dir}: too many levels of symbolic links`);
    if (real === '/dev/null') throw new Error(`${dir} leads to /dev/null`);
    if (!this.#contains(real)) {
      // A resolved folder is always inside the root; this only guards against a race.
      throw new Error(`${dir} resolves outside ${this.root}`);
    }
    return { dir: real, name, realPath: posix.join(real, name) };
  }

  /** The root as a prefix of real paths: '' for '/', else without a trailing slash. */
  get #base(): string {
    return this.root === '/' ? '' : posix.normalize(this.root).replace(/\/+$/, '');
  }

  #contains(real: string): boolean {
    return this.#base === '' || real === this.#base || real.startsWith(`${this.#base}/`);
  }

  /** Makes the missing folders of `real` (inside the root) one by one; refuses links and files. */
  #makeDirs(real: string): string {
    const base = this.#base;
    const parts = real
      .slice(base.length)
      .split('/')
      .filter((part) => part !== '');
    let current = base;
    for (const part of parts) {
      current = `${current}/${part}`;
      let stat;
      try {
        stat = lstatSync(current);
      } catch {
        mkdirSync(current, { mode: 0o755 });
        stat = lstatSync(current);
      }
      if (stat.isSymbolicLink() || !stat.isDirectory()) {
        throw new Error(
          `${current} is not a folder (${stat.isSymbolicLink() ? 'a symlink' : 'a file'})`,
        );
      }
    }
    return current === '' ? '/' : current;
  }

  /** Whether the file is masked: a symlink to /dev/null, or empty (size 0). */
  isNullOrEmpty(path: string): boolean {
    const resolved = this.resolve(path);
    if (resolved === null) return false;
    if (resolved === '/dev/null') return true;
    try {
      const stat = statSync(resolved);
      return stat.isCharacterDevice() || (stat.isFile() && stat.size === 0);
    } catch {
      return false;
    }
  }

  /**
   * A regular file's text (at most `maxBytes`), or null: missing, a loop of links, not a
   * regular file (a FIFO there must not hang the read), too large.
   */
  readText(path: string, maxBytes = MAX_CONFIG_FILE_BYTES): string | null {
    try {
      const real = this.resolve(path);
      return real === null ? null : readRegularFile(real, maxBytes, 'file');
    } catch {
      return null;
    }
  }

  list(dir: string): string[] {
    try {
      const real = this.resolve(dir);
      return real === null ? [] : readdirSync(real);
    } catch {
      return [];
    }
  }

  /**
   * Files ending in `suffix` in `dirs` (highest priority first), one per name, sorted by name.
   * Hidden files are skipped, as systemd skips them.
   */
  confFiles(dirs: readonly string[], suffix: string): ConfFile[] {
    const byName = new Map<string, ConfFile>();
    const seenDirs = new Set<string>();
    for (const dir of dirs) {
      // /lib may be a symlink to /usr/lib (merged /usr): the same directory twice.
      const realDir = this.resolve(dir);
      if (realDir === null || seenDirs.has(realDir)) continue;
      seenDirs.add(realDir);
      for (const name of this.list(dir)) {
        if (!name.endsWith(suffix) || name.startsWith('.')) continue;
        const path = posix.join(dir, name);
        const existing = byName.get(name);
        if (existing) {
          existing.shadows.push(path);
          continue;
        }
        const real = this.resolve(path);
        let regular = real === '/dev/null';
        let missing = false;
        try {
          if (real !== null) {
            const stat = statSync(real);
            regular = stat.isFile() || stat.isCharacterDevice();
          }
        } catch {
          missing = true; // a dangling link
        }
        byName.set(name, {
          name,
          path,
          realPath: real ?? this.real(path),
          masked: regular && this.isNullOrEmpty(path),
          unreadable: !regular,
          missing,
          shadows: [],
        });
      }
    }
    return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
}
