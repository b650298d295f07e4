/**
 * The mesh seen from a node, end to end: three nodes in network namespaces with real VXLAN
 * (test/support/testbed.ts), the fake API server holding their Nodes as flanneld annotates
 * them, and `flannel-guard watch --mesh repair` on node1 as users run it (the bin, --kubeconfig,
 * --node). node1's "flanneld" is the test bed: it programs what the test says and misses what
 * the test says it misses.
 *
 * In order, on one bed: a peer's VTEP re-created with a new MAC and republished while node1
 * misses the event (stale-mac, repaired, real TCP back); the repaired entry put back after a
 * rewrite of node1's own MAC; a peer's public IP changed (stale-underlay, repaired); two Nodes
 * publishing one VtepMAC (duplicate-mac, an Event naming both); a stand-in that keeps writing
 * the stale entry back (contested, no fight, the writer named); a deleted Node (orphans).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';

import { backendDataKey } from '../lib/kubernetes/annotation';
import { FakeApiServer, type JsonObject } from './support/fake-apiserver';
import { CLI, startNodeGuard, type GuardProcess, type GuardLine } from './support/guard-process';
import { httpGet } from './support/loopback-http';
import { execFile, tempDirPrefix, waitFor, type RunResult } from './support/netns';
import { parseExposition, valueOf } from './support/prometheus';
import { FlannelTestbed, VTEP, type TestbedNode } from './support/testbed';

const PREFIX = 'flannel.alpha.coreos.com';
const GRACE_MS = 1000;
/** Generous bounds for a busy machine (not measurements: the figures are printed). */
const VERDICT_WAIT_MS = 20_000;

function annotationsOf(node: TestbedNode, mac = node.publishedMac, publicIp = node.underlayIp) {
  return {
    [backendDataKey('ipv4')]: JSON.stringify({ VNI: 1, VtepMAC: mac }),
    [`${PREFIX}/backend-type`]: 'vxlan',
    [`${PREFIX}/kube-subnet-manager`]: 'true',
    [`${PREFIX}/public-ip`]: publicIp,
  };
}

interface MeshLine extends GuardLine {
  key: string;
  verdict: string;
  writer?: number;
}

describe('the mesh seen from node1 (three nodes, real VXLAN, the fake API server)', function () {
  this.timeout(240_000);
  let bed: FlannelTestbed;
  let fake: FakeApiServer;
  let dir: string;
  let guard: GuardProcess;
  let kubeconfig: string;

  function startGuard(mode: string, node = bed.node(1)): Promise<GuardProcess> {
    return startNodeGuard(node, kubeconfig, ['--mesh', mode, '--mesh-grace', String(GRACE_MS)]);
  }

  before(async function () {
    fake = await FakeApiServer.start();
    dir = mkdtempSync(tempDirPrefix('mesh'));
    bed = await FlannelTestbed.create({ nodes: 3, udev: false });
    for (const node of bed.nodes) {
      fake.addNode({
        name: node.name,
        podCIDR: node.podCidr,
        internalIP: node.underlayIp,
        annotations: annotationsOf(node),
      });
    }
    kubeconfig = fake.writeKubeconfig(dir);
    guard = await startGuard('repair');
  });

  after(async function () {
    await guard?.stop();
    await bed?.destroy();
    await fake?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const n = (index: number): TestbedNode => bed.node(index);

  function meshLine(key: string, verdict: string, from = 0): Promise<MeshLine> {
    return guard.waitFor(
      (line) => line.event === 'mesh' && line.key === key && line.verdict === verdict,
      VERDICT_WAIT_MS,
      from,
    ) as Promise<MeshLine>;
  }

  async function arpMacOn(node: TestbedNode, address: string): Promise<string | undefined> {
    return (await node.neighbours()).find((entry) => entry.dst === address)?.lladdr;
  }

  const endpoint = (): string => `http://${String(guard.events('ready')[0]?.metrics)}`;

  /** `flannel-guard status --mesh` for node1, as a user runs it. */
  function meshStatus(json: boolean, extra: string[] = []): Promise<RunResult> {
    const args = ['status', '--mesh', '--netns', n(1).ns.name, '--kubeconfig', kubeconfig];
    return execFile(CLI, [...args, '--node', 'node1', ...extra, ...(json ? ['--json'] : [])], {
      allowFailure: true,
      timeoutMs: 30_000,
    });
  }

  /** node1's permanent entries no Node in the API server publishes, read with iproute2. */
  async function orphansOnNode1(): Promise<string[]> {
    const published = bed.nodes
      .filter((node) => fake.hasNode(node.name))
      .map((node) => ({
        name: node.name,
        vtepIp: node.vtepIp,
        mac: (
          JSON.parse(fake.annotations(node.name)[backendDataKey('ipv4')] ?? '{}') as {
            VtepMAC?: string;
          }
        ).VtepMAC,
      }));
    const arps = (await n(1).neighbours())
      .filter((entry) => entry.state?.includes('PERMANENT') === true)
      .filter((entry) => !published.some((p) => p.name !== 'node1' && p.vtepIp === entry.dst))
      .map((entry) => `arp ${entry.dst}`);
    const fdbs = (await n(1).fdb())
      .filter((entry) => entry.dst !== undefined && entry.mac !== '00:00:00:00:00:00')
      .filter((entry) => !published.some((p) => p.mac === entry.mac))
      .map((entry) => `fdb ${entry.mac} ${entry.dst ?? ''}`);
    return [...arps, ...fdbs];
  }

  async function tcpWorks(from: TestbedNode, to: TestbedNode): Promise<boolean> {
    return bed.tcp(from, to, { bytes: 20_000, timeoutMs: 5000 });
  }

  it('reports every peer ok and this node in step with its annotation', async function () {
    await meshLine('node2|ipv4', 'ok');
    await meshLine('node3|ipv4', 'ok');
    await meshLine('self|node1|ipv4', 'ok');
    assert.equal(await tcpWorks(n(1), n(2)), true);
  });

  it('a peer republishes a new VtepMAC that node1 missed: stale-mac, repaired, TCP back', async function () {
    const from = guard.lines.length;
    const mac = await bed.restartFlannel(n(2), [n(1)]);
    const republished = Date.now();
    fake.setAnnotation('node2', backendDataKey('ipv4'), JSON.stringify({ VNI: 1, VtepMAC: mac }));
    assert.notEqual(await arpMacOn(n(1), n(2).vtepIp), mac, 'node1 missed the event');
    const stale = await meshLine('node2|ipv4', 'stale-mac', from);
    const staleAfter = Date.now() - republished;
    assert.ok(staleAfter >= GRACE_MS - 50, `reported after ${staleAfter} ms, before the grace`);
    const repair = await guard.waitFor((l) => l.event === 'mesh-repair', VERDICT_WAIT_MS, from);
    assert.equal(repair.node, 'node2');
    assert.equal(repair.error, undefined);
    await meshLine('node2|ipv4', 'ok', from);
    assert.equal(await arpMacOn(n(1), n(2).vtepIp), mac);
    const fdb = (await n(1).fdb()).find((entry) => entry.mac === mac);
    assert.equal(fdb?.dst, n(2).underlayIp);
    assert.equal(await tcpWorks(n(1), n(2)), true, 'TCP node1 -> node2 after the repair');
    assert.equal(await tcpWorks(n(2), n(1)), true, 'TCP node2 -> node1 after the repair');
    console.log(
      `      stale-mac reported ${staleAfter} ms after the republish (grace ${GRACE_MS} ms); TCP passed ${Date.now() - republished} ms after it`,
    );
    assert.equal((stale.subject as { row: { arpMac: string } }).row.arpMac !== mac, true);
  });

  it("the repaired entry survives a rewrite of node1's own MAC", async function () {
    const from = guard.lines.length;
    const repaired = n(2).publishedMac;
    await n(1).setVtepMac('02:00:00:00:00:99');
    await guard.waitFor((l) => l.event === 'restored', VERDICT_WAIT_MS, from);
    assert.equal(await n(1).currentMac(), n(1).publishedMac);
    assert.equal(await arpMacOn(n(1), n(2).vtepIp), repaired, 'the repaired value came back');
    assert.equal(await tcpWorks(n(1), n(2)), true);
  });

  it("a peer's public IP changes: stale-underlay, the FDB entry repaired", async function () {
    const from = guard.lines.length;
    const moved = '192.0.2.23';
    await n(3).ns.ip(['addr', 'add', `${moved}/24`, 'dev', 'eth0']);
    fake.setAnnotation('node3', `${PREFIX}/public-ip`, moved);
    await meshLine('node3|ipv4', 'stale-underlay', from);
    await meshLine('node3|ipv4', 'ok', from);
    const fdb = (await n(1).fdb()).find((entry) => entry.mac === n(3).publishedMac);
    assert.equal(fdb?.dst, moved);
    assert.equal(await tcpWorks(n(1), n(3)), true);
  });

  it('two Nodes publish one VtepMAC: duplicate-mac for both, on both guards, an Event naming both', async function () {
    const from = guard.lines.length;
    const own = n(3).publishedMac;
    // node2's own guard, reporting: it sees node3 publish node2's own MAC.
    const second = await startGuard('report', n(2));
    try {
      fake.setAnnotation(
        'node3',
        backendDataKey('ipv4'),
        JSON.stringify({ VNI: 1, VtepMAC: n(2).publishedMac }),
      );
      await meshLine('node2|ipv4', 'duplicate-mac', from);
      await meshLine('node3|ipv4', 'duplicate-mac', from);
      const onNode2 = await second.waitFor(
        (l) => l.event === 'mesh' && l.key === 'node3|ipv4' && l.verdict === 'duplicate-mac',
        VERDICT_WAIT_MS,
      );
      assert.deepEqual((onNode2.subject as { row: { sharedWith: string[] } }).row.sharedWith, [
        'node2',
      ]);
    } finally {
      await second.stop();
    }
    // doctor --cluster finds the same, from the Nodes alone.
    const doctor = await execFile(
      CLI,
      [
        'doctor',
        '--cluster',
        '--netns',
        n(1).ns.name,
        '--kubeconfig',
        kubeconfig,
        '--node',
        'node1',
        '--json',
      ],
      { allowFailure: true, timeoutMs: 60_000 },
    );
    assert.equal(doctor.code, 1, doctor.stderr);
    const checks = (
      JSON.parse(doctor.stdout) as { checks: { id: string; verdict: string; evidence: string[] }[] }
    ).checks;
    const duplicate = checks.find((c) => c.id === 'cluster-vtep-macs');
    assert.equal(duplicate?.verdict, 'fail');
    assert.deepEqual(duplicate.evidence, [
      `flannel.1 ${n(2).publishedMac}: published by node2, node3`,
    ]);
    assert.equal(
      guard.lines.slice(from).some((l) => l.event === 'mesh-repair'),
      false,
      'a duplicate is reported, never repaired',
    );
    const text = (event: JsonObject): string => String(event.note);
    // events.k8s.io/v1, as the guard writes them to an API server that has the group.
    const event = await waitFor(
      () =>
        fake
          .eventsV1()
          .find(
            (e) =>
              e.reason === 'PeerVtepMacDuplicate' &&
              (e.regarding as JsonObject).name === 'node1' &&
              text(e).includes('node3'),
          ),
      { timeoutMs: VERDICT_WAIT_MS, what: 'the PeerVtepMacDuplicate Event on node1' },
    );
    assert.ok(event, 'an Event on node1');
    assert.match(text(event), /node2/);
    fake.setAnnotation('node3', backendDataKey('ipv4'), JSON.stringify({ VNI: 1, VtepMAC: own }));
    await meshLine('node3|ipv4', 'ok', from);
  });

  it('a stand-in keeps writing the stale entry back: contested, no fight, the writer named', async function () {
    const from = guard.lines.length;
    const stale = '02:00:00:00:00:22';
    const writeStale = () =>
      n(1).ns.ip([
        'neigh',
        'replace',
        n(2).vtepIp,
        'lladdr',
        stale,
        'dev',
        VTEP,
        'nud',
        'permanent',
      ]);
    let contested: MeshLine | undefined;
    for (let round = 0; round < 4 && contested === undefined; round += 1) {
      const at = guard.lines.length;
      await writeStale();
      const next = (await guard.waitFor(
        (l) =>
          l.event === 'mesh' &&
          l.key === 'node2|ipv4' &&
          (l.verdict === 'contested' || l.verdict === 'ok'),
        VERDICT_WAIT_MS,
        at,
      )) as MeshLine;
      if (next.verdict === 'contested') contested = next;
    }
    assert.ok(contested, 'contested within four rounds');
    assert.equal(typeof contested.writer, 'number');
    const repairs = guard.lines.slice(from).filter((l) => l.event === 'mesh-repair').length;
    assert.equal(repairs, 2, 'two repairs, then it stops');
    await new Promise((resolve) => setTimeout(resolve, GRACE_MS * 2));
    assert.equal(await arpMacOn(n(1), n(2).vtepIp), stale, 'left alone');
    // The readiness judgement says so (the Node condition's value).
    const vtep = await httpGet(`${endpoint()}/vtep`);
    assert.equal(vtep.status, 503);
    const judged = JSON.parse(vtep.body) as { condition: { reason: string; message: string } };
    assert.equal(judged.condition.reason, 'VtepPeersStale');
    assert.match(judged.condition.message, /node2 ipv4 contested/);
    // status --mesh sees it too, from a dump, and fails.
    const table = await meshStatus(false);
    assert.equal(table.code, 1, table.stderr);
    const row = table.stdout.split('\n').find((line) => line.startsWith('node2 '));
    assert.match(
      row ?? '',
      new RegExp(`198\\.18\\.2\\.0 +\\S+ +${stale} +192\\.0\\.2\\.12 +stale-mac$`),
    );
    // What the peer publishes changes (flanneld restarted there, node1's stand-in follows):
    // the contest is over.
    const mac = await bed.restartFlannel(n(2));
    fake.setAnnotation('node2', backendDataKey('ipv4'), JSON.stringify({ VNI: 1, VtepMAC: mac }));
    await meshLine('node2|ipv4', 'ok', guard.lines.length - 1);
    assert.equal(await tcpWorks(n(1), n(2)), true);
  });

  it('a deleted Node leaves orphans behind (reported, not pruned)', async function () {
    const from = guard.lines.length;
    fake.deleteNode('node3');
    await guard.waitFor(
      (l) => l.event === 'mesh' && l.verdict === 'orphan' && String(l.key).includes('|arp|'),
      VERDICT_WAIT_MS,
      from,
    );
    await guard.waitFor(
      (l) => l.event === 'mesh' && l.verdict === 'orphan' && String(l.key).includes('|fdb|'),
      VERDICT_WAIT_MS,
      from,
    );
    assert.equal(await arpMacOn(n(1), n(3).vtepIp), n(3).publishedMac, 'left in place');
    const metrics = await httpGet(`${endpoint()}/metrics`);
    const exposition = parseExposition(metrics.body);
    // node3's two entries, and FDB entries of MACs nobody publishes any more (flanneld never
    // deletes an old MAC's), as iproute2 reads them.
    const orphans = await orphansOnNode1();
    assert.ok(orphans.includes(`arp ${n(3).vtepIp}`), orphans.join(', '));
    assert.ok(
      orphans.some((o) => o.startsWith(`fdb ${n(3).publishedMac} `)),
      orphans.join(', '),
    );
    assert.equal(
      valueOf(exposition, 'flannel_guard_mesh_peers', { verdict: 'orphan' }),
      orphans.length,
      `${orphans.join(', ')}; the guard's: ${JSON.stringify((await meshStatus(true)).stdout)}`,
    );
    assert.equal(valueOf(exposition, 'flannel_guard_mesh_peers', { verdict: 'ok' }), 1);
    assert.ok(
      (valueOf(exposition, 'flannel_guard_mesh_repairs_total', { result: 'written' }) ?? 0) >= 3,
    );
    assert.equal((await httpGet(`${endpoint()}/vtep`)).status, 200, 'orphans do not count');
    const readyz = JSON.parse((await httpGet(`${endpoint()}/readyz`)).body) as {
      mesh: { consistent: boolean; orphans: number };
    };
    assert.equal(readyz.mesh.consistent, true);
    assert.equal(readyz.mesh.orphans, orphans.length);
    const status = await meshStatus(true);
    assert.equal(status.code, 0, status.stderr);
    const report = JSON.parse(status.stdout) as {
      consistent: boolean;
      table: { peers: { node: string; verdict: string }[]; orphans: unknown[] };
    };
    assert.deepEqual(
      report.table.peers.map((p) => [p.node, p.verdict]),
      [['node2', 'ok']],
    );
    assert.equal(report.table.orphans.length, orphans.length);
    assert.equal(report.consistent, true);
  });

  it('with --mesh prune, the orphans go after the grace, and stay gone after a MAC rewrite', async function () {
    await guard.stop();
    guard = await startGuard('prune');
    await waitFor(() => guard.events('mesh-prune').length >= 3, {
      timeoutMs: VERDICT_WAIT_MS,
      what: 'three orphans pruned',
    });
    const lines = guard.events('mesh-prune');
    assert.equal(lines.length, 3, JSON.stringify(lines));
    assert.ok(
      lines.every((l) => l.error === undefined),
      JSON.stringify(lines),
    );
    assert.equal(await arpMacOn(n(1), n(3).vtepIp), undefined, "node3's ARP entry deleted");
    const fdbMacs = (await n(1).fdb()).map((entry) => entry.mac);
    assert.equal(fdbMacs.includes(n(3).publishedMac), false, "node3's FDB entry deleted");
    assert.equal(fdbMacs.includes(n(2).publishedMac), true, "node2's stays");
    const from = guard.lines.length;
    await n(1).setVtepMac('02:00:00:00:00:98');
    await guard.waitFor((l) => l.event === 'restored', VERDICT_WAIT_MS, from);
    assert.equal(
      await arpMacOn(n(1), n(3).vtepIp),
      undefined,
      'not put back: left the restore set',
    );
    assert.equal(await arpMacOn(n(1), n(2).vtepIp), n(2).publishedMac);
    assert.equal(await tcpWorks(n(1), n(2)), true);
  });

  it("flannel's DirectRouting: a peer with neither entry is direct with --mesh-direct-routing, missing without", async function () {
    await guard.stop();
    guard = await startNodeGuard(n(1), kubeconfig, [
      ...['--mesh', 'repair', '--mesh-grace', String(GRACE_MS), '--mesh-direct-routing'],
    ]);
    await meshLine('node2|ipv4', 'ok');
    // What flanneld leaves for a peer on node1's own segment: no ARP entry, no FDB entry.
    await n(1).ns.run(['ip', 'neigh', 'del', n(2).vtepIp, 'dev', VTEP]);
    for (const entry of await n(1).fdb()) {
      if (entry.mac !== n(2).publishedMac || entry.dst === undefined) continue;
      await n(1).ns.run(['bridge', 'fdb', 'del', entry.mac, 'dev', VTEP, 'dst', entry.dst]);
    }
    await meshLine('node2|ipv4', 'direct');
    const peersOf = (result: RunResult): string[][] =>
      (
        JSON.parse(result.stdout) as { table: { peers: { node: string; verdict: string }[] } }
      ).table.peers.map((p) => [p.node, p.verdict]);
    const plain = await meshStatus(true);
    assert.equal(plain.code, 1, plain.stderr);
    assert.deepEqual(peersOf(plain), [['node2', 'missing']]);
    const direct = await meshStatus(true, ['--mesh-direct-routing']);
    assert.equal(direct.code, 0, direct.stderr);
    assert.deepEqual(peersOf(direct), [['node2', 'direct']]);
    await new Promise((resolve) => setTimeout(resolve, 2 * GRACE_MS));
    assert.equal(guard.events('mesh-repair').length, 0, 'a direct peer is not repaired');
    assert.equal(await arpMacOn(n(1), n(2).vtepIp), undefined);
    const readyz = JSON.parse((await httpGet(`${endpoint()}/readyz`)).body) as {
      mesh: { consistent: boolean };
    };
    assert.equal(readyz.mesh.consistent, true);
  });
});
