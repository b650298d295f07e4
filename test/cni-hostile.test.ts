/**
 * flannel-guard-cni against hostile or broken input (issue 11, item 9), run
 * by the real runtime where order matters: libcni (Debian's, through
 * fg-cnitool) runs DEL in reverse and stops at the first failure, so our DEL
 * must never fail, whatever the configuration says. Also: error objects
 * repeat the configuration's version, thousands of peers stay inside the
 * budget with a partial repair said to be one, unusable peer addresses and
 * broken expect files are refused, stdin is capped.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { MAX_EXPECT_FILE_BYTES, MAX_STDIN_BYTES } from '../lib/cni/request';
import { MAX_PEERS } from '../lib/ensure/ensure';
import {
  CniRuntime,
  buildLibcniTool,
  errorProblems,
  libcni,
  type NetConf,
  type PluginRun,
} from './support/cni-runtime';
import { Netns, tempDirPrefix, trackChild } from './support/netns';

const VTEP_MAC = '0e:00:00:00:00:01';
const POD_PREV = { cniVersion: '1.0.0', interfaces: [], ips: [] };

/** Peer N of a big cluster: VTEP 198.18.x.y and underlay 192.0.2.z (z cycles). */
function peer(n: number): { vtepIp: string; mac: string; underlayIp: string } {
  const hex = (v: number): string => v.toString(16).padStart(2, '0');
  return {
    vtepIp: `198.18.${Math.floor(n / 250) + 10}.${(n % 250) + 1}`,
    mac: `0e:01:00:${hex(n >> 16)}:${hex((n >> 8) & 0xff)}:${hex(n & 0xff)}`,
    underlayIp: `192.0.2.${(n % 250) + 2}`,
  };
}

describe('flannel-guard-cni: hostile input (real kernel, netns, libcni)', function () {
  this.timeout(120_000);
  let node: Netns;
  let pod: Netns;
  let runtime: CniRuntime;
  let dir: string;

  before(async function () {
    buildLibcniTool();
    node = await Netns.create('fgt-cninode');
    pod = await Netns.create('fgt-cnipod');
    await node.ipBatch([
      'link add eth0 type veth peer name eth1',
      'addr add 192.0.2.1/24 dev eth0',
      'link set eth0 up',
      'link set eth1 up',
      `link add flannel.1 address ${VTEP_MAC} type vxlan id 1 dstport 8472 local 192.0.2.1 dev eth0 nolearning`,
      'link set flannel.1 up',
    ]);
    runtime = new CniRuntime(node);
    dir = mkdtempSync(tempDirPrefix('cni-hostile'));
  });

  after(async function () {
    runtime.dispose();
    await pod.destroy();
    await node.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  function config(fields: Record<string, unknown>, cniVersion = '1.0.0'): NetConf {
    return {
      cniVersion,
      name: 'podnet',
      type: 'flannel-guard-cni',
      prevResult: POD_PREV,
      ...fields,
    };
  }

  function invoke(conf: NetConf, command = 'ADD', stdin?: string): Promise<PluginRun> {
    return runtime.invoke(conf, {
      command,
      containerId: 'ctr1',
      netns: `/run/netns/${pod.name}`,
      ifname: 'eth0',
      ...(stdin === undefined ? {} : { stdin }),
      timeoutMs: 30_000,
    });
  }

  function assertError(run: PluginRun, cniVersion: string, code: number, reason?: RegExp): void {
    assert.notEqual(run.code, 0, `${run.stdout}${run.stderr}`);
    assert.deepEqual(errorProblems(run.json, cniVersion), [], run.stdout);
    const error = run.json as { code: number; msg: string; details?: string };
    assert.equal(error.code, code, run.stdout);
    if (reason) assert.match(`${error.msg} ${error.details ?? ''}`, reason);
  }

  it('libcni DEL runs through a broken flannel-guard configuration: the bridge releases the pod', async function () {
    const ipamDir = join(dir, 'ipam');
    const cache = join(dir, 'cache');
    mkdirSync(ipamDir);
    const conflist = (guard: Record<string, unknown>, cniVersion = '1.0.0'): string => {
      const file = join(dir, `conflist-${Math.random().toString(16).slice(2)}.json`);
      writeFileSync(
        file,
        JSON.stringify({
          cniVersion,
          name: 'podnet',
          plugins: [
            {
              type: 'bridge',
              bridge: 'cni0',
              isGateway: true,
              ipam: {
                type: 'host-local',
                dataDir: ipamDir,
                ranges: [[{ subnet: '198.18.1.0/24' }]],
              },
            },
            { type: 'flannel-guard-cni', budgetMs: 5000, ...guard },
          ],
        }),
      );
      return file;
    };
    const attachment = {
      containerId: 'ctr-del',
      netns: `/run/netns/${pod.name}`,
      ifname: 'eth0',
    };
    const broken: [string, Record<string, unknown>, string][] = [
      ['an invalid MAC', { mac: 'zz:zz' }, '1.0.0'],
      ['a multicast MAC', { mac: '01:00:5e:00:00:01' }, '1.0.0'],
      ['an unsupported cniVersion', {}, '0.4.0'],
      ['bad peers', { peers: 'x' }, '1.0.0'],
    ];
    for (const [what, guard, version] of broken) {
      const added = await libcni(
        runtime,
        'ADD',
        conflist({}, version === '0.4.0' ? '1.0.0' : version),
        attachment,
        cache,
      );
      assert.equal(added.code, 0, `${what}: ADD ${added.stderr}`);
      assert.equal(
        readdirSync(join(ipamDir, 'podnet')).filter((f) => f.startsWith('198.')).length,
        1,
      );
      const deleted = await libcni(runtime, 'DEL', conflist(guard, version), attachment, cache);
      assert.equal(deleted.code, 0, `${what}: DEL failed: ${deleted.stderr}`);
      assert.deepEqual(
        readdirSync(join(ipamDir, 'podnet')).filter((f) => f.startsWith('198.')),
        [],
        `${what}: the address is released`,
      );
      const links = await pod.ipJson<{ ifname: string }[]>('link show');
      assert.deepEqual(
        links.map((l) => l.ifname),
        ['lo'],
        `${what}: the pod's interface is gone`,
      );
    }
  });

  it('DEL succeeds on an undecodable, empty or oversized request too; other commands still fail', async function () {
    for (const stdin of ['{"cniVersion": ', '', '[1,2]']) {
      const run = await invoke(config({}), 'DEL', stdin);
      assert.equal(run.code, 0, `${JSON.stringify(stdin)}: ${run.stdout}${run.stderr}`);
      assert.equal(run.stdout, '');
      assert.match(run.stderr, /DEL: nothing to release/);
    }
    assertError(await invoke(config({ mac: 'zz' }), 'ADD'), '1.0.0', 7);
  });

  it('the error object repeats the configuration cniVersion', async function () {
    assertError(await invoke(config({}, '0.4.0')), '0.4.0', 1, /incompatible/);
    assertError(await invoke(config({}, '0.3.1')), '0.3.1', 1);
    assertError(await invoke(config({ mac: 'zz' }, '1.1.0')), '1.1.0', 7);
    // Not a version at all: the newest this plugin speaks.
    assertError(await invoke(config({}, 'zz')), '1.1.0', 1);
  });

  it('refuses peers at unusable addresses (unspecified, loopback, multicast, broadcast)', async function () {
    const good = peer(1);
    for (const vtepIp of [
      '255.255.255.255',
      '0.0.0.0',
      '127.0.0.1',
      '224.0.0.1',
      '::1',
      'ff02::1',
      '::',
    ]) {
      assertError(await invoke(config({ peers: [{ ...good, vtepIp }] })), '1.0.0', 7, /peers/);
    }
    for (const underlayIp of [
      '224.0.0.1',
      '127.0.0.1',
      '0.0.0.0',
      '255.255.255.255',
      '::ffff:127.0.0.1',
    ]) {
      assertError(
        await invoke(config({ peers: [{ ...good, underlayIp }] })),
        '1.0.0',
        7,
        /underlayIp/,
      );
    }
    const neighbours = await node.ipJson<unknown[]>('neigh show dev flannel.1');
    assert.deepEqual(neighbours, [], 'nothing installed');
  });

  it('an expectFile holding null, an array, a string or a bad field: code 6 or 7 with a clear message', async function () {
    const cases: [string, number, RegExp][] = [
      ['null', 6, /does not hold a JSON object.*found null/],
      ['[1,2]', 6, /found an array/],
      ['"str"', 6, /found string/],
      ['{"mac": "zz"}', 7, /invalid mac/],
      ['{"peers": [{"vtepIp": "127.0.0.1", "mac": "0e:00:00:00:00:09"}]}', 7, /loopback/],
      ['not json', 6, /is not JSON/],
    ];
    for (const [text, code, reason] of cases) {
      const file = join(dir, 'expect.json');
      writeFileSync(file, text);
      assertError(
        await invoke(config({ expectFile: file, failOnError: true })),
        '1.0.0',
        code,
        reason,
      );
    }
    assertError(
      await invoke(config({ expectFile: '/dev/zero', failOnError: true })),
      '1.0.0',
      5,
      /not a file/,
    );
    // Sizes: 2 MiB is read whole (never cut and parsed); past the cap it is "larger", not JSON.
    const file = join(dir, 'expect.json');
    writeFileSync(file, `{"mac": "${VTEP_MAC}"${' '.repeat(2 * 1024 * 1024)}}`);
    const whole = await invoke(config({ expectFile: file, failOnError: true }));
    assert.equal(whole.code, 0, whole.stdout + whole.stderr);
    writeFileSync(file, `{"mac": "${VTEP_MAC}"${' '.repeat(MAX_EXPECT_FILE_BYTES)}}`);
    assertError(
      await invoke(config({ expectFile: file, failOnError: true })),
      '1.0.0',
      5,
      new RegExp(`larger than ${MAX_EXPECT_FILE_BYTES} bytes`),
    );
  });

  it(`${MAX_PEERS} peers: ADD inside its budget with the partial repair said to be one; more is refused`, async function () {
    const peers = Array.from({ length: MAX_PEERS }, (_, n) => peer(n));
    const small = await invoke(config({ mac: VTEP_MAC, peers, budgetMs: 400 }));
    assert.equal(small.code, 0, small.stderr);
    assert.deepEqual(small.json, POD_PREV);
    assert.match(small.stderr, /the 400 ms budget ran out with \d+ writes made: a partial repair/);
    assert.ok(small.elapsedMs < 400 + 250 + 400, `answered after ${small.elapsedMs} ms`);
    // With room: every entry, then CHECK finds nothing to do, inside a 1 s budget.
    const full = await invoke(config({ mac: VTEP_MAC, peers, budgetMs: 60_000 }));
    assert.equal(full.code, 0, full.stderr);
    assert.doesNotMatch(full.stderr, /partial|still not/);
    const arp = await node.ipJson<unknown[]>('-4 neigh show dev flannel.1 nud permanent');
    assert.equal(arp.length, MAX_PEERS);
    const check = await invoke(config({ mac: VTEP_MAC, peers, budgetMs: 1000 }), 'CHECK');
    assert.equal(check.code, 0, `${check.stdout}${check.stderr}`);
    assert.ok(check.elapsedMs < 1000 + 250 + 400, `CHECK answered after ${check.elapsedMs} ms`);
    const tooMany = [...peers, peer(MAX_PEERS)];
    assertError(await invoke(config({ peers: tooMany })), '1.0.0', 7, /at most 10000/);
    await node.ip('neigh flush dev flannel.1 nud permanent');
    await node.bridge('fdb flush dev flannel.1');
  });

  it('an endless stdin is cut at the cap: code 6, quickly (ADD and CHECK; DEL succeeds)', async function () {
    for (const command of ['ADD', 'CHECK']) {
      const started = Date.now();
      const result = await new Promise<{ code: number | null; stdout: string; written: number }>(
        (resolve) => {
          const child = trackChild(
            spawn(
              'ip',
              [
                'netns',
                'exec',
                node.name,
                'env',
                `CNI_COMMAND=${command}`,
                'CNI_CONTAINERID=ctr1',
                `CNI_NETNS=/run/netns/${pod.name}`,
                'CNI_IFNAME=eth0',
                `CNI_PATH=${runtime.binDir}`,
                join(runtime.binDir, 'flannel-guard-cni'),
              ],
              { stdio: ['pipe', 'pipe', 'pipe'] },
            ),
          );
          let stdout = '';
          let written = 0;
          child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
          child.stdin?.on('error', () => undefined);
          const chunk = Buffer.alloc(1024 * 1024, ' ');
          const pump = (): void => {
            // Bounded: four times the cap at most.
            while (written < 4 * MAX_STDIN_BYTES && child.stdin && !child.stdin.destroyed) {
              written += chunk.length;
              if (!child.stdin.write(chunk)) {
                child.stdin.once('drain', pump);
                return;
              }
            }
            child.stdin?.end();
          };
          pump();
          child.once('close', (code) => resolve({ code, stdout, written }));
        },
      );
      assert.notEqual(result.code, 0);
      const error = JSON.parse(result.stdout) as { code: number; details: string };
      assert.equal(error.code, 6, result.stdout);
      assert.match(error.details, /larger than/);
      assert.ok(Date.now() - started < 10_000);
      assert.ok(existsSync(runtime.binDir));
    }
  });
});
