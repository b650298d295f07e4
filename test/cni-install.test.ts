/**
 * Installing the shim in a scratch root, as the DaemonSet does on a node: the executable into the
 * bin folder (never half a file, also on a full disk), flannel-guard's entry as the last plugin of
 * flannel's list with every other byte left as flannel wrote it (seeded formats), put back when
 * flannel's installer writes its file again (`--watch`), and `cni uninstall` leaving the file as
 * flannel wrote it. What is not a list is left alone and said.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

import { SHIM_TYPE, withShim, withoutShim } from '../lib/cni/conflist';
import { CNI_SHIM } from './support/cni-runtime';
import { CLI } from './support/guard-process';
import {
  execFile,
  registerSyncCleanup,
  tempDirPrefix,
  trackChild,
  waitForExit,
} from './support/netns';
import { prng } from './support/prng';

/** flannel's own list, as its installer writes it (kube-flannel.yml's cni-conf.json). */
const FLANNEL_CONFLIST = `{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        "hairpinMode": true,
        "isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    }
  ]
}
`;

describe('flannel-guard cni install / uninstall (a scratch root)', function () {
  this.timeout(60_000);
  let root: string;
  let binDir: string;
  let confDir: string;
  let conflist: string;

  const cli = (...args: string[]) => execFile(CLI, args, { allowFailure: true, timeoutMs: 30_000 });
  /** `cni install` of this checkout's shim into the scratch root, the entry in its list. */
  const install = () =>
    cli('cni', 'install', '--bin-dir', binDir, '--conf-dir', confDir, '--shim', CNI_SHIM);

  beforeEach(function () {
    root = mkdtempSync(tempDirPrefix('cniinstall'));
    registerSyncCleanup(() => rmSync(root, { recursive: true, force: true }));
    binDir = join(root, 'opt/cni/bin');
    confDir = join(root, 'etc/cni/net.d');
    mkdirSync(binDir, { recursive: true });
    mkdirSync(confDir, { recursive: true });
    conflist = join(confDir, '10-flannel.conflist');
    writeFileSync(conflist, FLANNEL_CONFLIST);
  });

  afterEach(function () {
    spawnSync('umount', ['--lazy', binDir], { stdio: 'ignore' });
    rmSync(root, { recursive: true, force: true });
  });

  it('copies the shim, adds the entry last, is idempotent, and uninstall leaves both as they were', async function () {
    const installed = await install();
    assert.equal(installed.code, 0, installed.stdout + installed.stderr);
    assert.match(installed.stdout, /flannel-guard-cni installed\n.*10-flannel\.conflist: added\n$/);
    const copied = join(binDir, 'flannel-guard-cni');
    assert.deepEqual(readFileSync(copied), readFileSync(CNI_SHIM));
    assert.equal(statSync(copied).mode & 0o777, 0o755);
    const parsed = JSON.parse(readFileSync(conflist, 'utf8')) as { plugins: { type: string }[] };
    assert.deepEqual(
      parsed.plugins.map((p) => p.type),
      ['flannel', 'portmap', SHIM_TYPE],
    );
    const again = await install();
    assert.match(again.stdout, /unchanged\n.*: present\n$/);
    assert.deepEqual(readdirSync(binDir), ['flannel-guard-cni'], 'no temporary left');
    const removed = await cli('cni', 'uninstall', '--bin-dir', binDir, '--conf-dir', confDir);
    assert.equal(removed.code, 0, removed.stdout);
    assert.equal(readFileSync(conflist, 'utf8'), FLANNEL_CONFLIST, 'as flannel wrote it');
    assert.deepEqual(readdirSync(binDir), []);
  });

  it('a full bin folder: a clear error and nothing written, not even half a file', async function () {
    const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=8k', 'tmpfs', binDir]);
    assert.equal(mounted.status, 0, String(mounted.stderr));
    const run = await cli('cni', 'install', '--bin-dir', binDir, '--shim', CNI_SHIM);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /ENOSPC.*\(nothing written\)/);
    assert.deepEqual(readdirSync(binDir), []);
  });

  it('what is not a list is left alone and said: not JSON, no plugins, a single .conf first', async function () {
    const cases: [string, string, RegExp][] = [
      ['10-flannel.conflist', '{"name": "cbr0", "plugins": [', /not JSON/],
      ['10-flannel.conflist', '{"name": "cbr0", "type": "flannel"}', /no plugins list/],
      ['10-flannel.conflist', '[1, 2]', /not a JSON object/],
      ['05-bridge.conf', '{"name": "b", "type": "bridge"}', /not a configuration list/],
    ];
    for (const [name, text, reason] of cases) {
      for (const file of readdirSync(confDir)) unlinkSync(join(confDir, file));
      writeFileSync(join(confDir, name), text);
      const run = await install();
      assert.equal(run.code, 1, `${name}: ${run.stdout}`);
      assert.match(run.stdout, reason);
      assert.match(run.stdout, /left alone/);
      assert.equal(readFileSync(join(confDir, name), 'utf8'), text, 'unchanged');
    }
  });

  it("--watch puts the entry back when flannel's installer writes its file again (in place, renamed over, removed and written)", async function () {
    const child = trackChild(
      spawn(
        CLI,
        [
          'cni',
          'install',
          '--bin-dir',
          binDir,
          '--conf-dir',
          confDir,
          '--shim',
          CNI_SHIM,
          '--watch',
        ],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      ),
    );
    const hasEntry = (): boolean => readFileSync(conflist, 'utf8').includes(SHIM_TYPE);
    const eventually = async (what: string): Promise<void> => {
      for (let waited = 0; waited < 20_000; waited += 20) {
        try {
          if (hasEntry()) return;
        } catch {
          // between a removal and the file written again
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.fail(`the entry did not come back: ${what}`);
    };
    try {
      await eventually('at start');
      writeFileSync(conflist, FLANNEL_CONFLIST);
      await eventually('written in place');
      writeFileSync(join(confDir, '.tmp-flannel'), FLANNEL_CONFLIST);
      renameSync(join(confDir, '.tmp-flannel'), conflist);
      await eventually('renamed over');
      unlinkSync(conflist);
      await new Promise((resolve) => setTimeout(resolve, 100));
      writeFileSync(conflist, FLANNEL_CONFLIST);
      await eventually('removed and written');
      // Only the entry was added each time: without it, the file is flannel's.
      assert.equal(withoutShim(readFileSync(conflist, 'utf8')), FLANNEL_CONFLIST);
    } finally {
      child.kill('SIGTERM');
    }
    assert.ok(await waitForExit(child, 5000), 'it stops on SIGTERM');
    assert.equal(child.exitCode, 0);
    const removed = await cli('cni', 'uninstall', '--bin-dir', binDir, '--conf-dir', confDir);
    assert.equal(removed.code, 0);
    assert.equal(readFileSync(conflist, 'utf8'), FLANNEL_CONFLIST);
  });

  it('seeded formats: the entry is the last plugin, every other byte stays, and taking it out gives the file back', function () {
    const seed = Number(process.env.FGT_SEED ?? Date.now() % 1_000_000);
    const random = prng(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    for (let i = 0; i < 300; i += 1) {
      const plugins = Array.from({ length: 1 + Math.floor(random() * 4) }, (_, k) => ({
        type: pick(['flannel', 'portmap', 'bandwidth', 'tuning']),
        ...(random() < 0.5 ? { note: pick(['a"b', 'ünï', '[]{},', '\\']) } : {}),
        ...(random() < 0.3 ? { nested: { list: [k, { x: null }] } } : {}),
      }));
      const object: Record<string, unknown> = { name: 'cbr0', cniVersion: '1.0.0' };
      const order = random() < 0.5 ? ['plugins', 'extra'] : ['extra', 'plugins'];
      for (const key of order)
        object[key] = key === 'plugins' ? plugins : { plugins: 'not this one' };
      let text = JSON.stringify(object, null, pick([0, 2, 4, '\t']));
      if (random() < 0.3) text = text.replace(/\n/g, '\r\n');
      if (random() < 0.3) text = `\n ${text}\n\n`;
      const what = `seed ${seed} case ${i}: ${text}`;
      const edit = withShim(text, { type: SHIM_TYPE, socket: '/run/x.sock' });
      assert.equal(edit.kind, 'insert', what);
      if (edit.kind !== 'insert') continue;
      const after = JSON.parse(edit.text) as { plugins: unknown[] };
      assert.deepEqual(
        after,
        { ...object, plugins: [...plugins, { type: SHIM_TYPE, socket: '/run/x.sock' }] },
        what,
      );
      assert.deepEqual(withShim(edit.text, { type: SHIM_TYPE }), { kind: 'present' }, what);
      assert.equal(withoutShim(edit.text), text, what);
      assert.equal(withoutShim(text), null, what);
    }
  });
});
