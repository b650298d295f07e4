/**
 * `flannel-guard undo` on the real kernel: what `watch` and `doctor --fix` changed (offload
 * features with their side effects, files written under a scratch root with the folders made for
 * them) is taken back to exactly what was there before, as `ethtool -k` and the tree read it; a
 * running guard makes it refuse and change nothing; a dry run changes nothing; a file changed
 * since it was written is left.
 */
import assert from 'node:assert/strict';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  mkdirSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

import { binding } from '../lib/core/binding';
import { JOURNAL_NAME } from '../lib/core/journal';
import { CLI, GuardProcess } from './support/guard-process';
import {
  execFile,
  Netns,
  registerSyncCleanup,
  tempDirPrefix,
  type RunResult,
} from './support/netns';

/** Every folder and file under `dir` with its content: what a tree holds, not when. */
function treeOf(dir: string, prefix = ''): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true })
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .flatMap((entry) => {
      const path = join(prefix, entry.name);
      if (entry.isDirectory()) return [`${path}/`, ...treeOf(dir, path)];
      return [`${path}: ${readFileSync(join(dir, path), 'utf8')}`];
    });
}

/** A root for `doctor --fix` of its own: udev's default .link file and a NetworkManager. */
function scratchRoot(): string {
  const root = mkdtempSync(tempDirPrefix('undoroot'));
  registerSyncCleanup(() => rmSync(root, { recursive: true, force: true }));
  const defaultLink = '/usr/lib/systemd/network/99-default.link';
  mkdirSync(join(root, '/usr/lib/systemd/network'), { recursive: true });
  copyFileSync(defaultLink, join(root, defaultLink));
  mkdirSync(join(root, 'etc/NetworkManager'), { recursive: true });
  writeFileSync(join(root, 'etc/NetworkManager/NetworkManager.conf'), '[main]\nplugins=keyfile\n');
  return root;
}

describe('flannel-guard undo', function () {
  this.timeout(60_000);
  let ns: Netns;
  let state: string;

  const undo = (...args: string[]): Promise<RunResult> =>
    execFile(CLI, ['undo', '--netns', ns.name, '--state-dir', state, ...args], {
      allowFailure: true,
      timeoutMs: 30_000,
    });
  /** What `status` lists of the journal for this namespace. */
  const listed = async (...args: string[]): Promise<unknown> => {
    const run = await execFile(
      CLI,
      ['status', '--netns', ns.name, '--state-dir', state, '--offload', 'none', ...args],
      { allowFailure: true, timeoutMs: 30_000 },
    );
    assert.equal(run.code, 0, run.stdout + run.stderr);
    return args.includes('--json')
      ? (JSON.parse(run.stdout) as { changes: unknown }).changes
      : run.stdout;
  };
  const offloads = async (): Promise<string> =>
    (await ns.run(['ethtool', '-k', 'flannel.1'])).stdout;

  beforeEach(async function () {
    ns = await Netns.create('fgt-undo');
    state = mkdtempSync(tempDirPrefix('undo'));
    registerSyncCleanup(() => rmSync(state, { recursive: true, force: true }));
    await ns.ipBatch([
      'link add eth0 type veth peer name eth0p',
      'addr add 192.0.2.31/24 dev eth0',
      'link set eth0 up',
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning local 192.0.2.31 dev eth0',
      'link set flannel.1 up',
    ]);
  });

  afterEach(async function () {
    await ns.destroy();
    rmSync(state, { recursive: true, force: true });
  });

  it('after watch: refused while the guard runs, nothing on a dry run, then every feature as before', async function () {
    const before = await offloads();
    const guard = await GuardProcess.start(['--netns', ns.name, '--state-dir', state]);
    try {
      const changed = await offloads();
      assert.match(changed, /^\s*tx-checksum-ip-generic: off$/m);
      const refused = await undo();
      assert.equal(refused.code, 1, refused.stdout);
      assert.match(refused.stdout, /a guard watches flannel\.1: stop it first/);
      assert.equal(await offloads(), changed, 'nothing changed while the guard runs');
    } finally {
      await guard.stop();
    }
    const text = String(await listed());
    assert.match(
      text,
      /^changes \(flannel-guard undo takes them back\):\n {2}flannel\.1 \(netns \S+\): tx-checksum-ip-generic was on, /m,
    );
    const plan = await undo('--dry-run');
    assert.equal(plan.code, 0, plan.stdout + plan.stderr);
    assert.match(plan.stdout, /would set flannel\.1 \(netns \S+\): tx-checksum-ip-generic on, /);
    assert.notEqual(await offloads(), before, 'the dry run changed nothing');
    const done = await undo();
    assert.equal(done.code, 0, done.stdout + done.stderr);
    assert.match(done.stdout, /tx-checksum-ip-generic on.* \(as before\)/);
    assert.equal(await offloads(), before);
    const again = await undo();
    assert.equal(again.stdout, 'undo: nothing to take back\n');
    assert.doesNotMatch(String(await listed()), /^changes/m);
    assert.deepEqual(await listed('--json'), { stateDir: state, records: [], error: null });
  });

  it('refused while the name is held by a guard whose queue of joiners is full (no descriptor to close)', async function () {
    const guard = await GuardProcess.start(['--netns', ns.name, '--state-dir', state]);
    await guard.stop();
    const before = await offloads();
    // Held by this test, never accepting: later claims wait in its queue until it is full.
    const name = 'flannel-guard/flannel.1';
    const held = binding.claimName(name, ns.path);
    const fds = [held.fd];
    try {
      assert.equal(held.held, true);
      for (let i = 0; i < 64 && fds.at(-1) !== -1; i += 1)
        fds.push(binding.claimName(name, ns.path).fd);
      assert.equal(fds.at(-1), -1, 'the queue is full');
      const refused = await undo();
      assert.equal(refused.code, 1, refused.stdout + refused.stderr);
      assert.match(refused.stdout, /a guard watches flannel\.1: stop it first/);
      assert.equal(await offloads(), before, 'nothing changed');
    } finally {
      for (const fd of fds) if (fd >= 0) closeSync(fd);
    }
  });

  it('after doctor --fix: the files and folders it made gone, the offloads as before; a file edited since is left', async function () {
    const root = scratchRoot();
    const treeBefore = treeOf(root);
    const offloadsBefore = await offloads();
    const fixed = await execFile(
      CLI,
      ['doctor', '--fix', '--root', root, '--netns', ns.name, '--state-dir', state],
      { allowFailure: true, timeoutMs: 30_000 },
    );
    const written = treeOf(root).filter((line) => !treeBefore.includes(line));
    assert.ok(written.includes('etc/systemd/'), `${fixed.stdout}\n${written.join('\n')}`);
    assert.ok(written.some((line) => line.startsWith('etc/systemd/network/10-flannel.link: ')));
    assert.ok(
      written.some((line) => line.startsWith('etc/NetworkManager/conf.d/99-flannel-guard.conf: ')),
    );
    assert.notEqual(await offloads(), offloadsBefore);
    const journal = readFileSync(join(state, JOURNAL_NAME), 'utf8');
    assert.match(journal, /"kind": "file"/);
    const { records } = (await listed('--json')) as { records: { kind: string; path?: string }[] };
    assert.deepEqual(
      records
        .filter((record) => record.kind === 'file')
        .map((record) => record.path?.slice(root.length))
        .sort(),
      ['/etc/NetworkManager/conf.d/99-flannel-guard.conf', '/etc/systemd/network/10-flannel.link'],
    );
    assert.ok(records.some((record) => record.kind === 'offload'));
    // A journal that does not read is said, and status still answers.
    const saved = readFileSync(join(state, JOURNAL_NAME));
    writeFileSync(join(state, JOURNAL_NAME), '{');
    assert.match(String(await listed()), /^changes: EINVAL: change journal \S+: not JSON$/m);
    writeFileSync(join(state, JOURNAL_NAME), saved);

    // A file edited since it was written is left, and says so; the rest goes.
    const dropIn = join(root, 'etc/NetworkManager/conf.d/99-flannel-guard.conf');
    writeFileSync(dropIn, '[keyfile]\nunmanaged-devices=interface-name:eth9\n');
    const done = await undo();
    assert.equal(done.code, 0, done.stdout + done.stderr);
    assert.match(
      done.stdout,
      /left \S+99-flannel-guard\.conf: changed since flannel-guard wrote it/,
    );
    assert.equal(await offloads(), offloadsBefore);
    rmSync(dropIn);
    rmSync(join(root, 'etc/NetworkManager/conf.d'), { recursive: true });
    assert.deepEqual(treeOf(root), treeBefore);
  });

  it('after doctor --fix: a file it replaced is given back its text and its permission bits', async function () {
    const root = scratchRoot();
    mkdirSync(join(root, 'etc/NetworkManager/conf.d'));
    const dropIn = join(root, 'etc/NetworkManager/conf.d/99-flannel-guard.conf');
    // 0600: once given back as 0644, readable by all; 0664: what the umask alone would narrow.
    for (const mode of [0o600, 0o664, 0o640]) {
      const text = `[keyfile]\nunmanaged-devices=interface-name:eth${mode}\n`;
      writeFileSync(dropIn, text);
      chmodSync(dropIn, mode);
      const fixed = await execFile(
        CLI,
        ['doctor', '--fix', '--root', root, '--netns', ns.name, '--state-dir', state],
        { allowFailure: true, timeoutMs: 30_000 },
      );
      assert.notEqual(readFileSync(dropIn, 'utf8'), text, fixed.stdout + fixed.stderr);
      assert.equal(lstatSync(dropIn).mode & 0o7777, 0o644, fixed.stdout);
      const done = await undo();
      assert.equal(done.code, 0, done.stdout + done.stderr);
      assert.equal(readFileSync(dropIn, 'utf8'), text, done.stdout);
      assert.equal((lstatSync(dropIn).mode & 0o7777).toString(8), mode.toString(8), done.stdout);
    }
  });

  it('doctor --fix leaves what undo could not put back, and makes no change it cannot note', async function () {
    const root = scratchRoot();
    mkdirSync(join(root, 'etc/NetworkManager/conf.d'));
    const dropInPath = '/etc/NetworkManager/conf.d/99-flannel-guard.conf';
    const dropIn = join(root, dropInPath);
    const doctor = (stateDir: string): Promise<RunResult> =>
      execFile(
        CLI,
        ['doctor', '--fix', '--root', root, '--netns', ns.name, '--state-dir', stateDir],
        { allowFailure: true, timeoutMs: 30_000 },
      );
    const journalPaths = (): string[] =>
      (
        JSON.parse(readFileSync(join(state, JOURNAL_NAME), 'utf8')) as {
          records: { path?: string }[];
        }
      ).records.flatMap((record) => (record.path === undefined ? [] : [record.path]));
    // What stands at the drop-in's name, kept as it is: a link (undo would put back a file), a
    // FIFO, a file over the 1 MiB cap (the journal would not hold what undo needs).
    const big = 'x'.repeat(1024 * 1024 + 1);
    const cases: [string, () => Promise<void>, () => void][] = [
      [
        'a symbolic link',
        async () => symlinkSync('../NetworkManager.conf', dropIn),
        () => assert.equal(readlinkSync(dropIn), '../NetworkManager.conf'),
      ],
      [
        'a FIFO',
        async () => void (await execFile('mkfifo', [dropIn])),
        () => assert.ok(lstatSync(dropIn).isFIFO()),
      ],
      [
        'larger than 1048576 bytes',
        async () => writeFileSync(dropIn, big),
        () => assert.equal(readFileSync(dropIn, 'utf8'), big),
      ],
    ];
    for (const [what, make, unchanged] of cases) {
      await make();
      const run = await doctor(state);
      assert.match(
        run.stdout,
        new RegExp(
          `NOT FIXED networkmanager: cannot write ${dropInPath}: .*${what}.*: undo could not put it back`,
        ),
        `${what}\n${run.stdout}${run.stderr}`,
      );
      unchanged();
      assert.ok(!journalPaths().includes(dropIn), what);
      assert.ok(journalPaths().includes(join(root, 'etc/systemd/network/10-flannel.link')), what);
      rmSync(dropIn);
    }

    // A journal that does not read: the files written are taken back, no device is touched,
    // and each is said.
    rmSync(join(root, 'etc/systemd'), { recursive: true });
    const treeBefore = treeOf(root);
    const offloadsBefore = await offloads();
    const badState = mkdtempSync(tempDirPrefix('undobad'));
    registerSyncCleanup(() => rmSync(badState, { recursive: true, force: true }));
    mkdirSync(join(badState, JOURNAL_NAME));
    const run = await doctor(badState);
    for (const [check, path] of [
      ['link-files', '/etc/systemd/network/10-flannel.link'],
      ['networkmanager', dropInPath],
    ]) {
      assert.match(
        run.stdout,
        new RegExp(`NOT FIXED ${check}: cannot write ${path}: .*change journal .*a directory`),
        run.stdout + run.stderr,
      );
    }
    assert.match(run.stdout, /NOT FIXED vtep-mac flannel\.1: .*change journal .*a directory/);
    assert.deepEqual(treeOf(root), treeBefore);
    assert.equal(await offloads(), offloadsBefore);
  });
});
