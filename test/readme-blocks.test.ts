/**
 * Every shell block in the README and docs/ is run here, so that an example cannot rot: each is
 * marked `<!-- NAME: … -->` and NAME has a runner below (a block without one fails the first test).
 * - quick-start: as it is, against a throw-away namespace of its own name.
 * - main-job: its `watch` with the defaults inside a throw-away namespace (as a node's own would
 *   be), with `npm ci` stood in for (the CI ran it before these tests), stopped with SIGTERM: the
 *   block's exit status is 0. Its `.ci/run` line is the command that runs these tests.
 * - cluster: there is no registry, cluster or docker here; the block runs with `docker`,
 *   `kustomize` and `kubectl` stand-ins that record their arguments, and every command is checked
 *   against the repository: the Dockerfile the image test builds, the image name the kustomization
 *   rewrites and the DaemonSet uses, the DaemonSet's name and namespace, the Events' component.
 *   (The image itself: test/image.test.ts; the manifests: test/kubernetes-deploy.test.ts.)
 * - cni-by-hand: as it is, against a throw-away namespace of its own name; its stdout is the one
 *   the README shows after it.
 * (The TypeScript blocks are type-checked by test/lint.test.ts.)
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  accessSync,
  constants,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

import { readProcess } from '../lib/cli/launcher';
import { EVENT_COMPONENT } from '../lib/kubernetes/event-recorder';
import { loadClientNode } from '../lib/kubernetes/client-node';
import { packageVersion } from '../lib/core/package-version';
import { flannelDeviceLines, UNDERLAY_LINES } from './support/flannel-device';
import { Netns, registerSyncCleanup, tempDirPrefix, waitFor } from './support/netns';
import { inNetns, runCommand, startCommand } from './support/node-child';

const CHECKOUT = join(__dirname, '..', '..');
const RUNNERS = ['quick-start', 'main-job', 'cluster', 'cni-by-hand'] as const;
type Runner = (typeof RUNNERS)[number];

interface ShellBlock {
  file: string;
  marker: string | null;
  code: string;
}

function shellBlocks(): ShellBlock[] {
  const files = ['README.md', ...readdirSync(join(CHECKOUT, 'docs')).map((f) => join('docs', f))];
  return files
    .filter((file) => file.endsWith('.md'))
    .flatMap((file) =>
      [
        ...readFileSync(join(CHECKOUT, file), 'utf8').matchAll(
          /^(?:<!-- ([\w-]+):[^>]*-->\n)?```(?:sh|bash|shell|console)\n([\s\S]*?)^```$/gm,
        ),
      ].map((match) => ({ file, marker: match[1] ?? null, code: match[2] ?? '' })),
    );
}

function block(name: Runner): string {
  const found = shellBlocks().filter((b) => b.marker === name);
  assert.equal(found.length, 1, `one block marked ${name}`);
  return found[0]?.code ?? '';
}

/** Commands of a block, comments and blank lines left out. */
const commandsOf = (code: string): string[] =>
  code
    .split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter((line) => line !== '' && !line.startsWith('#'));

/** A folder of stand-ins for `names`: each appends its name, cwd and arguments to `log`. */
function standIns(names: readonly string[], script: (name: string) => string): string {
  const dir = mkdtempSync(tempDirPrefix('standins'));
  registerSyncCleanup(() => rmSync(dir, { recursive: true, force: true }));
  for (const name of names) writeFileSync(join(dir, name), script(name), { mode: 0o755 });
  return dir;
}

describe("the README's shell blocks, run", function () {
  this.timeout(120_000);

  it('every shell block in the README and docs/ is marked with a runner here', function () {
    const blocks = shellBlocks();
    assert.ok(blocks.length >= 3, `found ${blocks.length} blocks`);
    for (const b of blocks) {
      assert.ok(
        b.marker !== null && (RUNNERS as readonly string[]).includes(b.marker),
        `${b.file}: a shell block without a runner (<!-- NAME: … --> before it): ${b.code.slice(0, 80)}`,
      );
    }
    assert.deepEqual(
      [...new Set(blocks.map((b) => b.marker))].sort(),
      [...RUNNERS].sort(),
      'and every runner has its block',
    );
  });

  it('quick-start, as it is: ready, the offload turned off, the rewrite set back', async function () {
    // Its own namespace name, so that it never meets one of the machine's.
    const name = `fgt-try-${process.pid}`;
    registerSyncCleanup(() => {
      spawnSync('ip', ['netns', 'del', name]);
    });
    const run = await runCommand(
      ['sh', '-e', '-c', block('quick-start').replaceAll('fg-try', name)],
      { timeoutMs: 60_000, cwd: CHECKOUT },
    );
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /ready: flannel\.1 \(ifindex \d+\) mac /);
    assert.match(
      run.stdout,
      /offload: flannel\.1 tx-checksum-ip-generic=off \[start\]; also changed: /,
    );
    assert.match(run.stdout, /rewrite: flannel\.1 \S+ -> 0e:00:00:00:00:01 /);
    assert.match(run.stdout, /restored: flannel\.1 mac \S+ and 0 neighbour entries in /);
    assert.equal(existsSync(`/run/netns/${name}`), false, 'the block removed its namespace');
  });

  it('cni-by-hand, as it is: CHECK finds the drift, ADD fixes it and passes prevResult on, CHECK and STATUS pass', async function () {
    const name = `fgt-cni-${process.pid}`;
    registerSyncCleanup(() => {
      spawnSync('ip', ['netns', 'del', name]);
    });
    const run = await runCommand(['sh', '-c', block('cni-by-hand').replaceAll('fg-cni', name)], {
      timeoutMs: 60_000,
      cwd: CHECKOUT,
    });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    // The text block after it is what the README says the block prints.
    const readme = readFileSync(join(CHECKOUT, 'README.md'), 'utf8');
    const after = readme.slice(readme.indexOf('<!-- cni-by-hand'));
    const shown = /^```text\n([\s\S]*?)^```$/m.exec(after);
    assert.equal(run.stdout, shown?.[1], 'the README shows what the block prints');
    assert.match(run.stderr, /flannel-guard-cni: flannel\.1 repaired in [\d.]+ ms: offload /);
    assert.equal(existsSync(`/run/netns/${name}`), false, 'the block removed its namespace');
  });

  it('main-job: watch with the defaults takes flannel.1 on, corrects a rewrite, and SIGTERM ends the block with 0', async function () {
    const [mainJob, tests, ...rest] = commandsOf(block('main-job'));
    assert.deepEqual(rest, [], 'two commands: the main job and the tests');
    assert.equal(tests, '.ci/run');
    accessSync(join(CHECKOUT, '.ci', 'run'), constants.X_OK);
    assert.ok(mainJob !== undefined && mainJob.startsWith('npm ci && '), mainJob);
    const npm = standIns(
      ['npm'],
      () => '#!/bin/sh\n[ "$*" = ci ] && exit 0\necho "npm $*" >&2\nexit 1\n',
    );
    const ns = await Netns.create('fgt-main');
    try {
      await ns.ipBatch([...UNDERLAY_LINES, ...flannelDeviceLines(null)]);
      // The CLI's default state dir is the test run's own (FLANNEL_GUARD_STATE_DIR).
      const job = startCommand([...inNetns(ns.name), 'sh', '-c', mainJob], {
        cwd: CHECKOUT,
        env: { ...process.env, PATH: `${npm}:${process.env.PATH ?? ''}` },
        timeoutMs: 60_000,
      });
      try {
        await job.waitForLine((l) =>
          l.includes('offload: flannel.1 tx-checksum-ip-generic=off [start]'),
        );
        await job.waitForLine((l) => l.includes('ready: flannel.1 '));
        await ns.ip('link set flannel.1 address 0e:00:00:00:00:02');
        await job.waitForLine((l) => l.includes('restored: flannel.1 mac '));
        const guard = await waitFor(
          async () => (await ns.pids()).find((pid) => readProcess(pid)?.comm === 'node'),
          { timeoutMs: 5_000, what: "the guard among the namespace's processes" },
        );
        process.kill(guard, 'SIGTERM');
        const ended = await job.exited;
        assert.equal(ended.code, 0, ended.stdout + ended.stderr);
      } finally {
        await job.kill();
      }
    } finally {
      await ns.destroy();
    }
  });

  it('cluster: every command names what the repository has (docker, kustomize and kubectl stood in for)', async function () {
    const log = join(mkdtempSync(tempDirPrefix('cluster')), 'commands');
    registerSyncCleanup(() => rmSync(join(log, '..'), { recursive: true, force: true }));
    const bin = standIns(
      ['docker', 'kustomize', 'kubectl'],
      (name) =>
        `#!/bin/sh\n(IFS=$(printf '\\037'); printf '%s\\n' "${name}$IFS$PWD$IFS$*") >> "${log}"\n`,
    );
    const run = await runCommand(['sh', '-e', '-c', block('cluster')], {
      cwd: CHECKOUT,
      env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` },
    });
    assert.equal(run.code, 0, run.stderr);
    const commands = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((line) => {
        const [tool = '', cwd = '', ...args] = line.split('\x1f');
        return { tool, cwd, args };
      });
    const k8s = await loadClientNode();
    const deploy = join(CHECKOUT, 'deploy');
    const [kustomization] = k8s.loadAllYaml(
      readFileSync(join(deploy, 'kustomization.yaml'), 'utf8'),
    ) as [{ resources: string[]; images: { name: string }[] }];
    const manifests = kustomization.resources.flatMap(
      (file) =>
        k8s.loadAllYaml(readFileSync(join(deploy, file), 'utf8')) as {
          kind: string;
          metadata: { name: string; namespace?: string };
          spec?: { template?: { spec?: { containers?: { image: string }[] } } };
        }[],
    );
    let image: string | undefined;
    const seen: string[] = [];
    for (const { tool, cwd, args } of commands) {
      const command = [tool, ...args].join(' ');
      seen.push(`${tool} ${args[0] ?? ''}`);
      if (tool === 'docker' && args[0] === 'build') {
        assert.equal(cwd, CHECKOUT, 'built from the repository root');
        const [file, tag, context] = [
          args[args.indexOf('-f') + 1],
          args[args.indexOf('-t') + 1],
          args.at(-1),
        ];
        assert.equal(file, 'deploy/Dockerfile', command);
        assert.ok(existsSync(join(CHECKOUT, 'deploy', 'Dockerfile')));
        assert.ok(
          existsSync(join(CHECKOUT, 'deploy', 'Dockerfile.dockerignore')),
          'its ignore file',
        );
        assert.equal(context, '.', command);
        image = tag;
        assert.match(
          image ?? '',
          new RegExp(`^REGISTRY/flannel-guard:${packageVersion().replaceAll('.', '\\.')}$`),
        );
      } else if (tool === 'docker' && args[0] === 'push') {
        assert.equal(args[1], image, 'pushes what it built');
      } else if (tool === 'kustomize') {
        assert.equal(cwd, deploy);
        assert.deepEqual(args, ['edit', 'set', 'image', `flannel-guard=${image ?? ''}`]);
        // The name it rewrites is the kustomization's and the DaemonSet container's image.
        assert.ok(kustomization.images.some((i) => i.name === 'flannel-guard'));
        const containers = manifests.flatMap((m) => m.spec?.template?.spec?.containers ?? []);
        assert.ok(
          containers.some((c) => c.image.split(':')[0] === 'flannel-guard'),
          'the DaemonSet uses it',
        );
      } else if (tool === 'kubectl' && args[0] === 'apply') {
        assert.deepEqual(args, ['apply', '-k', 'deploy/']);
        assert.equal(cwd, CHECKOUT);
      } else if (tool === 'kubectl' && args.includes('rollout')) {
        const namespace = args[args.indexOf('-n') + 1];
        const [kind, name] = (args.at(-1) ?? '').split('/');
        assert.equal(kind, 'daemonset');
        assert.ok(
          manifests.some(
            (m) =>
              m.kind === 'DaemonSet' &&
              m.metadata.name === name &&
              m.metadata.namespace === namespace,
          ),
          command,
        );
      } else if (tool === 'kubectl' && args[0] === 'get') {
        assert.equal(args[1], 'events');
        // A Node's Events are in `default`; `source` is the component (or reportingController).
        assert.equal(args[args.indexOf('-n') + 1], 'default');
        assert.equal(
          args[args.indexOf('--field-selector') + 1],
          `involvedObject.kind=Node,source=${EVENT_COMPONENT}`,
        );
      } else if (tool === 'kubectl' && args[0] === 'describe') {
        assert.deepEqual(args, ['describe', 'node', 'NODE']);
      } else {
        assert.fail(`a command this test does not know: ${command}`);
      }
    }
    assert.deepEqual(seen, [
      'docker build',
      'docker push',
      'kustomize edit',
      'kubectl apply',
      'kubectl -n',
      'kubectl get',
      'kubectl describe',
    ]);
  });
});
