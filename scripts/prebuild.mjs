#!/usr/bin/env node
// Puts prebuilt addons where node-gyp-build looks for them:
// prebuilds/<platform>-<arch>/node.napi.glibc.node (N-API, so one file serves
// every Node version from 20 on). The tarball then installs without a
// compiler. The package's prepack runs it with --all.
//
//   node scripts/prebuild.mjs          this machine's build (build/Release), copied
//   node scripts/prebuild.mjs --all    that, and linux-arm64 cross-compiled with
//                                      Debian's g++-aarch64-linux-gnu
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function target(arch) {
  return join(root, 'prebuilds', `linux-${arch}`, 'node.napi.glibc.node');
}

function place(from, arch) {
  mkdirSync(dirname(target(arch)), { recursive: true });
  copyFileSync(from, target(arch));
  // stderr: `npm pack --json` prints its JSON on stdout, with what prepack prints.
  console.error(`prebuild: ${target(arch)}`);
}

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

/** Cross-compiles the addon for arm64 in a scratch copy of the sources (build/ stays as it is). */
function crossCompileArm64() {
  const scratch = mkdtempSync(join(tmpdir(), 'fg-prebuild-arm64-'));
  try {
    cpSync(join(root, 'native'), join(scratch, 'native'), { recursive: true });
    copyFileSync(join(root, 'binding.gyp'), join(scratch, 'binding.gyp'));
    copyFileSync(join(root, 'package.json'), join(scratch, 'package.json'));
    symlinkSync(join(root, 'node_modules'), join(scratch, 'node_modules'));
    const tools = {
      CC: 'aarch64-linux-gnu-gcc',
      CXX: 'aarch64-linux-gnu-g++',
      LINK: 'aarch64-linux-gnu-g++',
      AR: 'aarch64-linux-gnu-ar',
    };
    const built = spawnSync(
      process.execPath,
      [
        join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
        'rebuild',
        '--arch=arm64',
        // N-API headers are the same for every architecture: this Node's own, never a download.
        `--nodedir=${process.env.npm_config_nodedir ?? join(dirname(process.execPath), '..')}`,
        '-j',
        '2',
      ],
      { cwd: scratch, env: { ...process.env, ...tools }, encoding: 'utf8' },
    );
    if (built.status !== 0) {
      fail(
        `the arm64 cross build failed (apt-get install g++-aarch64-linux-gnu):\n${built.stderr.slice(-4000)}`,
      );
    }
    place(join(scratch, 'build', 'Release', 'flannel_guard.node'), 'arm64');
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

const built = join(root, 'build', 'Release', 'flannel_guard.node');
if (!existsSync(built))
  fail(`${built} is missing: build the addon first (npm ci, or npx node-gyp rebuild)`);
if (process.platform !== 'linux') fail('prebuilt addons are made on Linux');
place(built, process.arch);
if (process.argv.includes('--all') && process.arch !== 'arm64') crossCompileArm64();
