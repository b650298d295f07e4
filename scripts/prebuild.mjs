#!/usr/bin/env node
// Builds the prebuilt addons where node-gyp-build looks for them:
// prebuilds/linux-<arch>/node.napi.<libc>.node for x64 and arm64, glibc and
// musl (N-API, so one file serves every Node version from 20 on). The tarball
// then installs without a compiler on Debian, RHEL 8 and later, Ubuntu 20.04
// and later, Amazon Linux and Alpine. The package's prepack runs it.
//
// The compiler is zig's clang (scripts/zig.mjs fetches it), for what it links
// against rather than for the language: it targets a glibc version by linking
// against stubs of that version's symbols (2.28 here, the floor Node 20 itself
// has), ships musl for both architectures, and links LLVM's libc++ statically,
// so a prebuild needs no libstdc++ of the node's and imports nothing newer than
// the floor. Debian 12's own g++ cannot: its static libstdc++ imports glibc
// 2.34-2.36 symbols. The sources and flags are binding.gyp's, through node-gyp.
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { zigCache, zigPath } from './zig.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

// The glibc the glibc prebuilds may need at most (the package test reads it back off them).
const GLIBC_FLOOR = '2.28';

const PREBUILDS = [
  { arch: 'x64', libc: 'glibc', zigTarget: `x86_64-linux-gnu.${GLIBC_FLOOR}` },
  { arch: 'arm64', libc: 'glibc', zigTarget: `aarch64-linux-gnu.${GLIBC_FLOOR}` },
  { arch: 'x64', libc: 'musl', zigTarget: 'x86_64-linux-musl' },
  { arch: 'arm64', libc: 'musl', zigTarget: 'aarch64-linux-musl' },
];

const prebuildPath = ({ arch, libc }) => `prebuilds/linux-${arch}/node.napi.${libc}.node`;

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

/** Builds one prebuild in a scratch copy of the sources (build/ stays as it is). */
function build(zig, prebuild) {
  const scratch = mkdtempSync(join(tmpdir(), `fg-prebuild-${prebuild.arch}-${prebuild.libc}-`));
  try {
    cpSync(join(root, 'native'), join(scratch, 'native'), { recursive: true });
    copyFileSync(join(root, 'binding.gyp'), join(scratch, 'binding.gyp'));
    copyFileSync(join(root, 'package.json'), join(scratch, 'package.json'));
    symlinkSync(join(root, 'node_modules'), join(scratch, 'node_modules'));
    // Only N-API's entry points leave the file: the libc++, libunwind and compiler-rt linked
    // in stay private, so nothing of Node's libstdc++ or libgcc_s binds to them or they to it.
    const exportsMap = join(scratch, 'exports.map');
    writeFileSync(
      exportsMap,
      '{ global: napi_register_module_v1; node_api_module_get_api_version_v1; local: *; };\n',
    );
    const compiler = `${zig} c++ -target ${prebuild.zigTarget}`;
    const env = {
      ...process.env,
      CC: `${zig} cc -target ${prebuild.zigTarget}`,
      CXX: compiler,
      LINK: `${compiler} -s -Wl,--version-script=${exportsMap}`,
      AR: `${zig} ar`,
      // zig compiles libc++ and the libc stubs once per target: kept with the build, not in $HOME.
      ZIG_GLOBAL_CACHE_DIR: zigCache,
      ZIG_LOCAL_CACHE_DIR: zigCache,
    };
    const built = spawnSync(
      process.execPath,
      [
        join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
        'rebuild',
        `--arch=${prebuild.arch}`,
        // N-API headers are the same for every target: this Node's own, never a download.
        `--nodedir=${process.env.npm_config_nodedir ?? join(dirname(process.execPath), '..')}`,
        '-j',
        '2',
      ],
      { cwd: scratch, env, encoding: 'utf8' },
    );
    if (built.status !== 0) {
      fail(
        `the ${prebuild.zigTarget} build failed:\n${(built.stdout + built.stderr).slice(-4000)}`,
      );
    }
    const target = join(root, prebuildPath(prebuild));
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(join(scratch, 'build', 'Release', 'flannel_guard.node'), target);
    // stderr: `npm pack --json` prints its JSON on stdout, with what prepack prints.
    console.error(`prebuild: ${target}`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (process.platform !== 'linux') fail('prebuilt addons are made on Linux');
let zig;
try {
  zig = zigPath();
} catch (error) {
  fail(error.message);
}
for (const prebuild of PREBUILDS) build(zig, prebuild);
