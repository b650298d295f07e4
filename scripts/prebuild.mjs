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
//
// Each built addon is kept by the content it was built from (build/prebuild-cache/<key>/:
// the sources, binding.gyp, this script, zig's version, node-addon-api's and Node's N-API
// headers), so a pack or a test run after a change to TypeScript alone copies it in seconds;
// a change to the native sources builds again. Cold, the four targets take 15-25 minutes on
// two cores (zig compiles libc++ and the C library stubs once per target); warm, a second.
//
// `--platform-tests` also builds the native core's C++ unit tests for musl on x64 and for arm64
// (build/platform-tests/<target>/native_tests), kept the same way, which the package test runs
// (arm64 under qemu-user): the one zig step of a test run. `--platform-tests-only` builds those
// alone. Each part has a lock of its own, so the package test takes the prebuilds as soon as they
// are made and runs beside the native tests' build.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ZIG_VERSION, zigCache, zigPath } from './zig.mjs';

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

const nodeDir = process.env.npm_config_nodedir ?? join(dirname(process.execPath), '..');
const cacheRoot = join(root, 'build', 'prebuild-cache');

/** What a prebuild is made of: its key changes with any input that changes the binary. */
function contentKey() {
  const hash = createHash('sha256');
  const add = (label, path) => {
    hash.update(`${label}\0`);
    hash.update(existsSync(path) ? readFileSync(path) : 'absent');
    hash.update('\0');
  };
  for (const dir of ['native', 'native/addon']) {
    for (const name of readdirSync(join(root, dir)).sort()) {
      if (/\.(cc|h)$/.test(name)) add(`${dir}/${name}`, join(root, dir, name));
    }
  }
  add('binding.gyp', join(root, 'binding.gyp'));
  add('prebuild.mjs', fileURLToPath(import.meta.url));
  add('node-addon-api', join(root, 'node_modules', 'node-addon-api', 'package.json'));
  for (const header of ['node_api.h', 'js_native_api.h', 'js_native_api_types.h']) {
    add(header, join(nodeDir, 'include', 'node', header));
  }
  hash.update(`zig ${ZIG_VERSION}`);
  return hash.digest('hex').slice(0, 32);
}

/** Builds one prebuild in a scratch copy of the sources (build/ stays as it is). */
function build(zig, prebuild, cached) {
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
        `--nodedir=${nodeDir}`,
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
    // Into the cache whole or not at all: a build stopped half-way leaves nothing there.
    mkdirSync(dirname(cached), { recursive: true });
    copyFileSync(join(scratch, 'build', 'Release', 'flannel_guard.node'), `${cached}.partial`);
    renameSync(`${cached}.partial`, cached);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The prebuild for `prebuild` from the cache, built first when the cache lacks it. */
function place(prebuild, key, getZig) {
  const cached = join(cacheRoot, key, `${prebuild.arch}-${prebuild.libc}.node`);
  const fresh = !existsSync(cached);
  if (fresh) build(getZig(), prebuild, cached);
  const target = join(root, prebuildPath(prebuild));
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(cached, target);
  // stderr: `npm pack --json` prints its JSON on stdout, with what prepack prints.
  console.error(`prebuild: ${target}${fresh ? '' : ' (unchanged sources: from the cache)'}`);
}

if (process.platform !== 'linux') fail('prebuilt addons are made on Linux');
let zig;
const getZig = () => {
  try {
    zig ??= zigPath();
  } catch (error) {
    fail(error.message);
  }
  return zig;
};
/**
 * The native unit tests for the platforms the host's own build (x64, glibc) does not cover: musl
 * on x64, built by zig like the musl prebuild, and arm64, built by Debian's cross compiler and run
 * under qemu-user (so the core's tests cover each libc and each architecture the prebuilds ship;
 * the arm64 musl prebuild is checked by its imports). Both are linked dynamically, against the
 * C library that runs them: zig links a musl executable statically unless it is handed a shared
 * library, which then compiles musl's libc.a from ~1 500 sources per target (a third of the
 * step's CPU time when both targets were static musl). The x64 tests are linked with the musl
 * prebuild's link options (unoptimised, stripped, PIC), so that zig's libc++ for it serves both.
 */
const PLATFORM_TESTS = [
  {
    name: 'x86_64-linux-musl',
    compilers: (getZig) => [
      `${getZig()} cc -target x86_64-linux-musl`,
      `${getZig()} c++ -target x86_64-linux-musl`,
    ],
    cmakeArgs: [
      '-DCMAKE_CXX_FLAGS=-O0 -fPIC',
      '-DCMAKE_EXE_LINKER_FLAGS=-s',
      '-DCMAKE_CXX_STANDARD_LIBRARIES=/lib/x86_64-linux-musl/libc.so', // Debian's (package musl)
      // zig's clang, told rather than identified: cmake identifies a compiler by linking a
      // program with it, for which zig would compile musl's libc.a and a libc++ in another mode.
      '-DCMAKE_CXX_COMPILER_ID_RUN=ON',
      '-DCMAKE_CXX_COMPILER_ID=Clang',
      '-DCMAKE_CXX_COMPILER_VERSION=17.0',
      '-DCMAKE_CXX_STANDARD_COMPUTED_DEFAULT=17',
      '-DCMAKE_CXX_EXTENSIONS_COMPUTED_DEFAULT=ON',
    ],
  },
  {
    name: 'aarch64-linux-gnu',
    compilers: () => ['aarch64-linux-gnu-gcc', 'aarch64-linux-gnu-g++'], // g++-aarch64-linux-gnu
    cmakeArgs: ['-DCMAKE_CXX_FLAGS=-O0'],
  },
];
const platformTestsDir = join(root, 'build', 'platform-tests');

/** What the platform tests are made of: every file of native/ (tests included), and this script. */
function platformTestsKey() {
  const hash = createHash('sha256');
  const walk = (dir) => {
    const entries = readdirSync(join(root, dir), { withFileTypes: true });
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(cc|h|txt)$/.test(entry.name)) {
        hash.update(`${path}\0`);
        hash.update(readFileSync(join(root, path)));
      }
    }
  };
  walk('native');
  hash.update(readFileSync(fileURLToPath(import.meta.url)));
  hash.update(`zig ${ZIG_VERSION}`);
  return hash.digest('hex').slice(0, 32);
}

/** Builds the native tests for `platform` through cmake into `cached`. */
function buildPlatformTests(getZig, platform, cached) {
  const scratch = mkdtempSync(join(tmpdir(), `fg-platform-tests-${platform.name}-`));
  try {
    const [cc, cxx] = platform.compilers(getZig);
    const env = {
      ...process.env,
      CC: cc,
      CXX: cxx,
      ZIG_GLOBAL_CACHE_DIR: zigCache,
      ZIG_LOCAL_CACHE_DIR: zigCache,
    };
    // -O0: these tests check the core's behaviour on musl and arm64, not the optimiser (the
    // prebuilds are -Os and -O3; the ASan/UBSan and valgrind runs cover undefined behaviour). cmake's
    // checks build static libraries, linking nothing, for the same reason as above.
    const steps = [
      [
        '-S',
        join(root, 'native'),
        '-B',
        scratch,
        '-DCMAKE_BUILD_TYPE=',
        ...platform.cmakeArgs,
        '-DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY',
        '-DCMAKE_SYSTEM_NAME=Linux',
        '-DCMAKE_AR=/usr/bin/llvm-ar',
        '-DCMAKE_RANLIB=/usr/bin/llvm-ranlib',
      ],
      ['--build', scratch, '--target', 'native_tests', '-j', '2'],
    ];
    for (const args of steps) {
      const step = spawnSync('cmake', args, { env, encoding: 'utf8' });
      if (step.status !== 0) {
        const output = (step.stdout + step.stderr).slice(-4000);
        fail(`the ${platform.name} native tests: cmake ${args.join(' ')}:\n${output}`);
      }
    }
    mkdirSync(dirname(cached), { recursive: true });
    copyFileSync(join(scratch, 'native_tests'), `${cached}.partial`);
    renameSync(`${cached}.partial`, cached);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The platform tests from their cache, built first when it lacks them. */
function placePlatformTests(getZig) {
  const key = platformTestsKey();
  const cacheDir = join(root, 'build', 'platform-tests-cache');
  if (existsSync(cacheDir)) {
    for (const old of readdirSync(cacheDir)) {
      if (old !== key) rmSync(join(cacheDir, old), { recursive: true, force: true });
    }
  }
  for (const platform of PLATFORM_TESTS) {
    const cached = join(cacheDir, key, platform.name, 'native_tests');
    const fresh = !existsSync(cached);
    if (fresh) buildPlatformTests(getZig, platform, cached);
    const target = join(platformTestsDir, platform.name, 'native_tests');
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(cached, target);
    chmodSync(target, 0o755);
    console.error(`prebuild: ${target}${fresh ? '' : ' (unchanged sources: from the cache)'}`);
  }
}

/**
 * One build of a part at a time per checkout (a pack and a test run, or two test runs, in one
 * checkout: the second waits, then finds the cache warm): a lock folder with the holder's pid; one
 * left by a process that is gone is taken over.
 */
function lock(name) {
  const dir = join(root, 'build', `${name}.lock`);
  mkdirSync(dirname(dir), { recursive: true });
  let announced = false;
  for (;;) {
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, 'pid'), String(process.pid));
      return () => rmSync(dir, { recursive: true, force: true });
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
    }
    let holder = Number.NaN;
    try {
      holder = Number(readFileSync(join(dir, 'pid'), 'utf8'));
    } catch {
      // Taken a moment ago: its pid is being written.
    }
    if (Number.isInteger(holder) && !isAlive(holder)) {
      rmSync(dir, { recursive: true, force: true });
      continue;
    }
    if (!announced) console.error(`prebuild: waiting for the run that holds ${dir}`);
    announced = true;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_000);
  }
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === 'EPERM';
  }
}

/** Runs `part` holding the lock named `name`. */
function locked(name, part) {
  const unlock = lock(name);
  try {
    part();
  } finally {
    unlock();
  }
}

const platformTestsOnly = process.argv.includes('--platform-tests-only');
if (!platformTestsOnly) {
  locked('prebuild', () => {
    const key = contentKey();
    // Only the current sources' builds are kept.
    if (existsSync(cacheRoot)) {
      for (const old of readdirSync(cacheRoot)) {
        if (old !== key) rmSync(join(cacheRoot, old), { recursive: true, force: true });
      }
    }
    for (const prebuild of PREBUILDS) place(prebuild, key, getZig);
  });
}
if (platformTestsOnly || process.argv.includes('--platform-tests')) {
  locked('platform-tests', () => placePlatformTests(getZig));
}
