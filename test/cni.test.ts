/**
 * flannel-guard-cni run exactly as a container runtime runs it: found by `type` in CNI_PATH,
 * CNI_* variables in the environment, its configuration (with name, cniVersion and prevResult
 * injected) on stdin, in the node's network namespace, chained after Debian's real `bridge` +
 * `host-local` plugins. Results and errors are checked against the spec (1.0.0 and 1.1.0).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';

import { parsePluginConfig, SUPPORTED_VERSIONS } from '../lib/cni/request';
import { Netns, registerSyncCleanup, tempDirPrefix } from './support/netns';
import {
  CniRuntime,
  errorProblems,
  pluginConfig,
  resultProblems,
  type ConfList,
  type NetConf,
  type PluginRun,
} from './support/cni-runtime';
import { FlannelTestbed, VTEP, type TestbedNode } from './support/testbed';
import { pingFrom } from './support/traffic';

const VETH_MAC_POLICY_NONE = '[Match]\nKind=veth\n\n[Link]\nMACAddressPolicy=none\n';
const CONFLIST = join(__dirname, '..', '..', 'deploy', 'cni', '10-flannel.conflist');

function tempDir(kind: string): string {
  const dir = mkdtempSync(tempDirPrefix(kind));
  registerSyncCleanup(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** bridge + host-local for node N's flannel subnet, as flannel delegates to them. */
function bridgeConf(node: TestbedNode, dataDir: string): NetConf {
  return {
    type: 'bridge',
    bridge: 'cni0',
    isGateway: true,
    ipMasq: false,
    mtu: 1450,
    ipam: {
      type: 'host-local',
      ranges: [
        [{ subnet: node.podCidr, rangeStart: `198.18.${node.index}.10`, gateway: node.gatewayIp }],
      ],
      routes: [{ dst: '198.18.0.0/15', gw: node.gatewayIp }],
      dataDir,
    },
  };
}

function assertSpecError(
  run: PluginRun,
  cniVersion: string,
  code: number,
): Record<string, unknown> {
  assert.notEqual(run.code, 0, `non-zero exit: ${run.stdout}${run.stderr}`);
  assert.deepEqual(errorProblems(run.json, cniVersion), [], run.stdout);
  const error = run.json as Record<string, unknown>;
  assert.equal(error.code, code, run.stdout);
  assert.equal(run.stdout.trim().split('\n').length, 1, 'one JSON object on stdout');
  return error;
}

describe('flannel-guard-cni chained after bridge + host-local (the test bed, real udevd)', function () {
  this.timeout(120_000);
  let bed: FlannelTestbed;
  let n1: TestbedNode;
  let n2: TestbedNode;
  let runtime: CniRuntime;
  let list: ConfList;
  const pods: Netns[] = [];
  let counter = 0;

  async function newPod(): Promise<{
    ns: Netns;
    attachment: { containerId: string; netns: string; ifname: string };
  }> {
    const ns = await Netns.create('fgt-cnipod');
    pods.push(ns);
    counter += 1;
    return { ns, attachment: { containerId: `pod${counter}abc`, netns: ns.path, ifname: 'eth0' } };
  }

  before(async function () {
    // udev's persistent policy also rewrites the host end of every veth bridge creates, racing the
    // plugin's read of it: bridge's CHECK then fails with "Mac doesn't match" (systemd #21185).
    // Nodes exempt veths as they exempt flannel.1; the VTEP stays under the persistent policy.
    bed = await FlannelTestbed.create({
      nodes: 2,
      udev: true,
      linkFiles: { '10-veth.link': VETH_MAC_POLICY_NONE },
    });
    [n1, n2] = [bed.node(1), bed.node(2)];
    runtime = new CniRuntime(n1.ns);
    list = {
      name: 'cbr0',
      cniVersion: '1.0.0',
      plugins: [
        bridgeConf(n1, tempDir('ipam')),
        {
          type: 'flannel-guard-cni',
          device: VTEP,
          mac: n1.publishedMac,
          peers: [{ vtepIp: n2.vtepIp, mac: n2.publishedMac, underlayIp: n2.underlayIp }],
          budgetMs: 5000,
        },
      ],
    };
  });

  after(async function () {
    runtime.dispose();
    await Promise.all(pods.map((pod) => pod.destroy()));
    await bed.destroy();
  });

  it('VERSION: 1.0.0 and 1.1.0, answering in the version asked', async function () {
    for (const asked of ['1.0.0', '1.1.0']) {
      const run = await runtime.invoke(
        { type: 'flannel-guard-cni' },
        { command: 'VERSION', stdin: JSON.stringify({ cniVersion: asked }) },
      );
      assert.equal(run.code, 0, run.stderr);
      assert.deepEqual(run.json, { cniVersion: asked, supportedVersions: [...SUPPORTED_VERSIONS] });
    }
  });

  it("ADD: prints bridge's result unchanged, repairs the VTEP udev rewrote, and the new pod reaches the other node's pod", async function () {
    // Node 2 has its published MAC back (as the guard or flannel would do), node 1 does not.
    await n2.setVtepMac(n2.publishedMac);
    await bed.programLocal(n2);
    const rewritten = await n1.currentMac();
    assert.notEqual(rewritten, n1.publishedMac, 'udev rewrote node 1');
    const { ns: pod, attachment } = await newPod();
    assert.equal(await pingFrom(pod, n2.podIp, 1000).catch(() => false), false, 'no network yet');

    const { result, runs } = await runtime.addList(list, attachment);
    const [bridge, guard] = runs as [PluginRun, PluginRun];
    assert.deepEqual(resultProblems(bridge.json, '1.0.0'), [], bridge.stdout);
    assert.equal(guard.code, 0, guard.stderr);
    assert.deepEqual(guard.json, bridge.json, 'prevResult passed through unchanged');
    assert.equal(guard.stdout.trim(), JSON.stringify(bridge.json));
    assert.deepEqual(resultProblems(result, '1.0.0'), []);
    assert.match(
      guard.stderr,
      new RegExp(
        `flannel\\.1 repaired in [\\d.]+ ms: mac: expected ${n1.publishedMac}, found ${rewritten}`,
      ),
    );

    assert.equal(await n1.currentMac(), n1.publishedMac);
    assert.deepEqual(
      (await n1.neighbours()).map((n) => [n.dst, n.lladdr]),
      [[n2.vtepIp, n2.publishedMac]],
    );
    assert.equal(await n1.feature('tx-checksum-ip-generic'), 'off');
    const address =
      ((result as { ips: { address: string }[] }).ips[0]?.address ?? '').split('/')[0] ?? '';
    assert.match(address, /^198\.18\.1\.\d+$/);
    assert.equal(await pingFrom(pod, n2.podIp, 2000), true, 'the new pod reaches node 2');
    assert.equal(await pingFrom(n2.podNs, address, 2000), true, "and node 2's pod reaches it");

    const checks = await runtime.checkList(list, attachment, result);
    for (const run of checks) {
      assert.equal(run.code, 0, run.stdout);
      assert.equal(run.stdout, '', 'CHECK prints nothing on success');
    }
  });

  it('CHECK: a spec error (code 100) naming the drift when the VTEP drifted; the next ADD repairs it', async function () {
    const { attachment } = await newPod();
    const { result } = await runtime.addList(list, attachment);
    await n1.setVtepMac('0e:12:34:56:78:9a');
    const guardConf = pluginConfig(list, list.plugins[1] as NetConf, result);
    const check = await runtime.invoke(guardConf, { command: 'CHECK', ...attachment });
    const error = assertSpecError(check, '1.0.0', 100);
    assert.equal(error.msg, 'VTEP flannel.1 drifted');
    assert.match(
      String(error.details),
      new RegExp(
        `mac: expected ${n1.publishedMac}, found 0e:12:34:56:78:9a; neighbour ${n2.vtepIp}: expected`,
      ),
    );
    assert.equal(await n1.currentMac(), '0e:12:34:56:78:9a', 'CHECK writes nothing');

    const { attachment: next } = await newPod();
    await runtime.addList(list, next);
    assert.equal(await n1.currentMac(), n1.publishedMac);
    assert.equal((await runtime.invoke(guardConf, { command: 'CHECK', ...attachment })).code, 0);
  });

  it('DEL: in reverse order; ours prints nothing and succeeds, also without CNI_NETNS or prevResult, and twice', async function () {
    const { attachment } = await newPod();
    const { result } = await runtime.addList(list, attachment);
    const runs = await runtime.delList(list, attachment, result);
    for (const run of runs) assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.equal(runs[0]?.stdout, '');
    const guardConf = pluginConfig(list, list.plugins[1] as NetConf, undefined);
    for (let i = 0; i < 2; i += 1) {
      const run = await runtime.invoke(guardConf, {
        command: 'DEL',
        containerId: attachment.containerId,
        ifname: 'eth0',
      });
      assert.equal(run.code, 0, run.stdout);
      assert.equal(run.stdout, '');
    }
  });

  it('STATUS and GC (1.1.0): succeed silently with the VTEP there; STATUS is error 50 without it; both need 1.1.0', async function () {
    const conf: NetConf = {
      type: 'flannel-guard-cni',
      name: 'cbr0',
      cniVersion: '1.1.0',
      device: VTEP,
      budgetMs: 5000,
    };
    const status = await runtime.invoke(conf, { command: 'STATUS' });
    assert.equal(status.code, 0, status.stdout);
    assert.equal(status.stdout, '');
    const gc = await runtime.invoke(
      { ...conf, 'cni.dev/valid-attachments': [{ containerID: 'pod1abc', ifname: 'eth0' }] },
      { command: 'GC' },
    );
    assert.equal(gc.code, 0, gc.stdout);
    assert.equal(gc.stdout, '');
    const missing = await runtime.invoke({ ...conf, device: 'flannel.7' }, { command: 'STATUS' });
    const error = assertSpecError(missing, '1.1.0', 50);
    assert.match(String(error.details), /flannel\.7 does not exist/);
    for (const command of ['STATUS', 'GC']) {
      assertSpecError(
        await runtime.invoke({ ...conf, cniVersion: '1.0.0' }, { command }),
        '1.0.0',
        1,
      );
    }
  });

  it('errors: missing or bad variables (4), undecodable config (6), unsupported version (1), not chained or bad fields (7)', async function () {
    const { attachment } = await newPod();
    const conf = pluginConfig(list, list.plugins[1] as NetConf, {
      cniVersion: '1.0.0',
      interfaces: [],
      ips: [],
    });
    for (const variable of [
      'CNI_COMMAND',
      'CNI_CONTAINERID',
      'CNI_NETNS',
      'CNI_IFNAME',
      'CNI_PATH',
    ]) {
      const run = await runtime.invoke(conf, {
        command: 'ADD',
        ...attachment,
        env: { [variable]: undefined },
      });
      const error = assertSpecError(run, '1.0.0', 4);
      assert.match(String(error.msg), new RegExp(variable));
    }
    assertSpecError(await runtime.invoke(conf, { command: 'FROB', ...attachment }), '1.0.0', 4);
    assertSpecError(
      await runtime.invoke(conf, { command: 'ADD', ...attachment, containerId: '-bad id' }),
      '1.0.0',
      4,
    );
    assertSpecError(
      await runtime.invoke(conf, { command: 'ADD', ...attachment, ifname: 'a/b' }),
      '1.0.0',
      4,
    );
    assertSpecError(
      await runtime.invoke(conf, { command: 'ADD', ...attachment, stdin: '{"cniVersion": ' }),
      '1.1.0',
      6,
    );
    assertSpecError(
      await runtime.invoke({ ...conf, cniVersion: '0.4.0' }, { command: 'ADD', ...attachment }),
      '0.4.0', // the error repeats the configuration's version
      1,
    );
    const notChained = { ...conf };
    delete notChained.prevResult;
    assertSpecError(
      await runtime.invoke(notChained, { command: 'ADD', ...attachment }),
      '1.0.0',
      7,
    );
    assertSpecError(
      await runtime.invoke(notChained, { command: 'CHECK', ...attachment }),
      '1.0.0',
      7,
    );
    for (const bad of [
      { mac: 'zz' },
      { peers: 'x' },
      { peers: [{ vtepIp: 'x', mac: n2.publishedMac }] },
      { budgetMs: -1 },
      { offload: { x: 'off' } },
      { device: '' },
      { failOnError: 'yes' },
      { expectFile: 'relative' },
    ]) {
      const run = await runtime.invoke({ ...conf, ...bad }, { command: 'ADD', ...attachment });
      assertSpecError(run, '1.0.0', 7);
    }
  });

  it('ADD with the VTEP missing goes on (prevResult, exit 0, reason on stderr); with failOnError it is error 101', async function () {
    const { attachment } = await newPod();
    const prevResult = {
      cniVersion: '1.0.0',
      interfaces: [{ name: 'eth0', sandbox: attachment.netns }],
      ips: [],
    };
    const conf = pluginConfig(
      list,
      { ...(list.plugins[1] as NetConf), device: 'flannel.7' },
      prevResult,
    );
    const run = await runtime.invoke(conf, { command: 'ADD', ...attachment });
    assert.equal(run.code, 0, run.stdout);
    assert.deepEqual(run.json, prevResult);
    assert.match(
      run.stderr,
      /VTEP flannel\.7 unavailable: flannel\.7 does not exist \(pod creation goes on\)/,
    );
    const strict = await runtime.invoke(
      { ...conf, failOnError: true },
      { command: 'ADD', ...attachment },
    );
    assertSpecError(strict, '1.0.0', 101);
    assertSpecError(await runtime.invoke(conf, { command: 'CHECK', ...attachment }), '1.0.0', 101);
  });

  it('the time budget: when it runs out ADD prints prevResult and exits 0 at once; CHECK answers 11 (try again later)', async function () {
    const { attachment } = await newPod();
    const prevResult = { cniVersion: '1.0.0', interfaces: [], ips: [], dns: {} };
    // 1 ms is over before the addon has loaded: the budget counts from reading the configuration.
    const conf = pluginConfig(list, { ...(list.plugins[1] as NetConf), budgetMs: 1 }, prevResult);
    await n1.setVtepMac('0e:12:34:56:78:9b');
    const run = await runtime.invoke(conf, { command: 'ADD', ...attachment });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(run.json, prevResult);
    // The budget stopped the writes before the first: the partial repair is reported as such.
    assert.match(
      run.stderr,
      /flannel\.1: the 1 ms budget ran out with 0 writes made: a partial repair \(mac: expected .*\); pod creation goes on/,
    );
    const check = await runtime.invoke(conf, { command: 'CHECK', ...attachment });
    assertSpecError(check, '1.0.0', 11);
    // With room it is repaired as usual.
    const again = await runtime.invoke(
      { ...conf, budgetMs: 5000 },
      { command: 'ADD', ...attachment },
    );
    assert.equal(again.code, 0);
    assert.equal(await n1.currentMac(), n1.publishedMac);
  });

  it('40 ADDs at once on one CPU with failOnError false: no pod fails, the budget counts from the configuration', async function () {
    const { attachment } = await newPod();
    const prevResult = { cniVersion: '1.0.0', interfaces: [], ips: [], dns: {} };
    const conf = pluginConfig(
      list,
      { ...(list.plugins[1] as NetConf), budgetMs: 5000, failOnError: false },
      prevResult,
    );
    await n1.setVtepMac('0e:12:34:56:78:9c');
    // Node's own start-up under this contention took the whole default budget before the
    // configuration (and its budgetMs) had been read: code 11 for most of them.
    const runs = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        runtime.invoke(conf, {
          command: 'ADD',
          ...attachment,
          containerId: `burst${i}abc`,
          cpus: '0',
          timeoutMs: 60_000,
        }),
      ),
    );
    const failed = runs.filter((run) => run.code !== 0 || !isDeepStrictEqual(run.json, prevResult));
    assert.deepEqual(
      failed.map((run) => `${run.code}: ${run.stdout}${run.stderr}`),
      [],
      `${failed.length} of 40 ADDs failed`,
    );
    assert.equal(await n1.currentMac(), n1.publishedMac);
  });

  it('expectFile: the published MAC and peers read from a file; absent means nothing published yet', async function () {
    const dir = tempDir('expect');
    const file = join(dir, 'expect.json');
    const { attachment } = await newPod();
    const prevResult = { cniVersion: '1.0.0', interfaces: [], ips: [] };
    const conf = pluginConfig(
      list,
      { type: 'flannel-guard-cni', expectFile: file, budgetMs: 5000 },
      prevResult,
    );
    await n1.setVtepMac('0e:12:34:56:78:9c');
    const absent = await runtime.invoke(conf, { command: 'ADD', ...attachment });
    assert.equal(absent.code, 0);
    assert.equal(
      await n1.currentMac(),
      '0e:12:34:56:78:9c',
      'nothing published: the MAC is left alone',
    );
    writeFileSync(
      file,
      JSON.stringify({
        mac: n1.publishedMac,
        peers: [{ vtepIp: n2.vtepIp, mac: n2.publishedMac, underlayIp: n2.underlayIp }],
      }),
    );
    const run = await runtime.invoke(conf, { command: 'ADD', ...attachment });
    assert.equal(run.code, 0, run.stderr);
    assert.equal(await n1.currentMac(), n1.publishedMac);
    assert.deepEqual(
      (await n1.neighbours()).map((n) => [n.dst, n.lladdr]),
      [[n2.vtepIp, n2.publishedMac]],
    );
    assert.equal(await bed.ping(n1, n2), true);
    writeFileSync(file, '{ not json');
    const broken = await runtime.invoke(
      { ...conf, failOnError: true },
      { command: 'ADD', ...attachment },
    );
    assertSpecError(broken, '1.0.0', 6);
  });

  it('the example conflist in deploy/cni: flannel, portmap, then flannel-guard-cni with a valid configuration', function () {
    const example = JSON.parse(readFileSync(CONFLIST, 'utf8')) as ConfList & {
      cniVersions: string[];
    };
    assert.deepEqual(
      example.plugins.map((p) => p.type),
      ['flannel', 'portmap', 'flannel-guard-cni'],
    );
    for (const version of [example.cniVersion, ...example.cniVersions]) {
      assert.ok((SUPPORTED_VERSIONS as readonly string[]).includes(version), version);
    }
    const plugin = parsePluginConfig(example.plugins[2] as Record<string, unknown>);
    assert.equal(plugin.device, 'flannel.1');
    assert.deepEqual(plugin.offload, { 'tx-checksum-ip-generic': false });
    assert.ok(plugin.budgetMs <= 1000);
    // No expectFile: nothing in the package writes one, so the example would promise a check it
    // never makes.
    assert.equal(plugin.expectFile, undefined);
  });
});
