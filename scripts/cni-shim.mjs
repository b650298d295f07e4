#!/usr/bin/env node
// Builds flannel-guard-cni, the CNI shim (native/cni-shim): a static, freestanding executable of
// a few kilobytes, by zig's clang (scripts/zig.mjs) as the prebuilt addons are. It links no C
// library, so one file per architecture runs on every node.
//
//   node scripts/cni-shim.mjs          build/flannel-guard-cni, for this machine (npm run build)
//   node scripts/cni-shim.mjs --all    prebuilds/linux-<arch>/flannel-guard-cni, x64 and arm64
//                                      (prepack: the package ships them)
//   node scripts/cni-shim.mjs --cc     build/flannel-guard-cni by the system's C compiler (the
//                                      image's build stage, which has gcc and no zig: the source
//                                      is freestanding, so any C compiler for the machine will do)
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { zigCache, zigPath } from './zig.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCES = ['shim.c', 'shim_json.c'].map((file) => join(root, 'native', 'cni-shim', file));
const TARGETS = { x64: 'x86_64-linux-musl', arm64: 'aarch64-linux-musl' };
const FLAGS = [
  '-nostdlib',
  '-static',
  '-ffreestanding',
  '-fno-builtin',
  '-fno-stack-protector',
  '-fno-asynchronous-unwind-tables',
  '-fno-unwind-tables',
  '-O2',
  '-Wall',
  '-Wextra',
  '-Werror',
  '-s',
];

/**
 * Builds the shim for `arch` at `output`, written beside and renamed (never half a file); by zig
 * for the target, or with `systemCompiler` by `cc` for this machine.
 */
export function buildShim(arch, output, systemCompiler = false) {
  const target = TARGETS[arch];
  if (target === undefined) throw new Error(`cni-shim: no target for ${arch} (x64, arm64)`);
  mkdirSync(dirname(output), { recursive: true });
  const partial = `${output}.partial-${process.pid}`;
  const [compiler, ...prefix] = systemCompiler ? ['cc'] : [zigPath(), 'cc', '-target', target];
  const built = spawnSync(compiler, [...prefix, ...FLAGS, '-o', partial, ...SOURCES], {
    encoding: 'utf8',
    env: { ...process.env, ZIG_GLOBAL_CACHE_DIR: zigCache, ZIG_LOCAL_CACHE_DIR: zigCache },
    timeout: 600_000,
  });
  if (built.status !== 0) {
    throw new Error(
      `cni-shim: zig cc for ${target} failed: ${built.error?.message ?? ''}${built.stderr}`,
    );
  }
  chmodSync(partial, 0o755);
  renameSync(partial, output);
  return output;
}

/** Where the shim for this machine is built. */
export const LOCAL_SHIM = join(root, 'build', 'flannel-guard-cni');

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const all = process.argv.includes('--all');
  const arches = all ? Object.keys(TARGETS) : [process.arch];
  for (const arch of arches) {
    const output = all ? join(root, 'prebuilds', `linux-${arch}`, 'flannel-guard-cni') : LOCAL_SHIM;
    console.error(`cni-shim: ${buildShim(arch, output, process.argv.includes('--cc'))}`);
  }
}
