/**
 * The Kubernetes integration against a local stand-in for kube-apiserver
 * (test/support/fake-apiserver.ts: HTTPS on 127.0.0.1, bearer token, the
 * real wire format), through the real @kubernetes/client-node: the node
 * annotation source (get + watch with bookmarks, 410 Gone, dropped and
 * refused connections, invalid or missing annotations, adopt by JSON merge
 * patch with a resourceVersion precondition and 409 retries), the Event
 * recorder (create, repeat patched with count, aggregation, rate limit,
 * retries), the metrics and the health endpoints scraped over loopback.
 *
 * What this does NOT cover (no real API server can run here):
 * - authorization: RBAC is not evaluated (the fake checks the bearer token
 *   only), so deploy/rbac.yaml is checked by reading it (kubernetes-deploy),
 *   not by an API server refusing a verb;
 * - strategic merge patch on lists, JSON patch, server-side apply, field
 *   validation, admission: the fake implements RFC 7386 merge only (the
 *   patches sent here touch maps and scalars, where strategic merge is the
 *   same);
 * - the watch cache's own behaviour: sendInitialEvents and its
 *   initial-events-end bookmark, resourceVersionMatch, bookmarks at the
 *   server's own pace, the server's default watch timeouts;
 * - HTTP/2, protobuf or CBOR encodings, API priority and fairness (429 with
 *   Retry-After), Events expiring after their TTL by themselves (a 404 on the
 *   patch of a repeat is injected instead);
 * - authentication other than a kubeconfig token: tokenFile, rotation, exec
 *   plugins are kubernetes-credentials.test.ts; OIDC is not covered;
 * - a watch that stalls without closing (the idle deadline is the server's
 *   timeout plus 30 s: too long for a test).
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { isSystemError } from '../lib/core/errors';
import type {
  ChecksumErrorsEvent,
  ChecksumSendersEvent,
  DeviceStatus,
  FlannelGuard,
  RewriteEvent,
  VerdictEvent,
} from '../lib/guard';
import type { ChecksumErrorCounters } from '../lib/core/types';
import {
  LEGACY_NODE_CONDITION_TYPE,
  NODE_CONDITION_TYPE,
  NodeConditionReporter,
  VtepHealth,
  vtepCondition,
  type NodeConditionValue,
} from '../lib/kubernetes/condition';
import { attributeWriter } from '../lib/udev/writer';
import {
  backendDataKey,
  readBackendData,
  withVtepMac,
  DEFAULT_ANNOTATION_PREFIX,
} from '../lib/kubernetes/annotation';
import { createKubernetesClient } from '../lib/kubernetes/client';
import { loadClientNode } from '../lib/kubernetes/client-node';
import { type KubernetesApi } from '../lib/kubernetes/api';
import { detectCluster, SERVICE_ACCOUNT_TOKEN } from '../lib/kubernetes/cluster';
import {
  EVENT_REASONS,
  EventRecorder,
  type DroppedEvent,
  type RecordedEvent,
} from '../lib/kubernetes/event-recorder';
import { nodeReference, recordGuardEvents } from '../lib/kubernetes/guard-events';
import { GuardMetrics } from '../lib/kubernetes/metrics';
import { PEER_NODES_PAGE, PeerNodes } from '../lib/kubernetes/peer-nodes';
import { parseListenAddress } from '../lib/kubernetes/listen';
import { GuardHealth, startMetricsServer } from '../lib/kubernetes/server';
import {
  KubernetesMacSource,
  type SourceStatus,
  type WatchRestartEvent,
} from '../lib/kubernetes/source';
import { collectEvents, nextEvent } from './support/events';
import {
  FakeApiServer,
  type FakeApiServerOptions,
  type JsonObject,
} from './support/fake-apiserver';
import { httpGet as get } from './support/loopback-http';
import { tempDirPrefix, waitFor } from './support/netns';
import { parseExposition, valueOf } from './support/prometheus';

const V4 = backendDataKey('ipv4');
const V6 = backendDataKey('ipv6');
const MAC_A = '5e:89:db:49:c6:a4';
const MAC_B = 'd6:02:e3:df:ea:7a';
const MAC_C = '0e:12:34:56:78:9a';
const MAC_V6 = '5e:89:db:49:c6:a6';

/** An `--offload auto` verdict on flannel.1: measured broken and turned off, or healthy. */
function verdictEvent(action: 'turned-off' | 'kept-on'): VerdictEvent {
  const broken = action === 'turned-off';
  return {
    device: 'flannel.1',
    ifindex: 4,
    feature: 'tx-checksum-ip-generic',
    verdict: broken ? 'broken' : 'healthy',
    action,
    active: !broken,
    detail: broken ? '1 peer answered echo, UDP and TCP with it off' : '1 peer answered',
    rounds: 4,
    probes: 12,
    msSinceStart: 6500,
    evidence: [],
  };
}

/** A rewrite event as the guard emits it, its writer named by the real attribution. */
function rewriteEvent(
  device: string,
  mac: string,
  expected: string,
  writer: 'udev' | 'other',
): RewriteEvent {
  const attribution = attributeWriter({
    persistentMac: writer === 'udev' ? mac : '02:aa:bb:cc:dd:ee',
    machineId: '/etc/machine-id',
    linkFile: '/usr/lib/systemd/network/99-default.link',
    linkFileFrom: 'udev-database',
    policy: 'persistent',
    macAddress: null,
    mac,
    msSinceCreation: writer === 'udev' ? 3 : null,
    addrAssignType: writer === 'udev' ? null : 3,
  });
  return {
    device,
    ifindex: 4,
    expected,
    mac,
    previous: expected,
    writer: attribution.writer,
    evidence: attribution.evidence,
    found: 'event',
    detail: attribution.detail,
    msSinceCreation: attribution.evidence.msSinceCreation,
    dryRun: false,
  };
}

function backendData(mac: string, vni = 1): string {
  return JSON.stringify({ VNI: vni, VtepMAC: mac });
}

function flannelAnnotations(mac: string): Record<string, string> {
  return {
    [V4]: backendData(mac),
    'flannel.alpha.coreos.com/backend-type': 'vxlan',
    'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
    'flannel.alpha.coreos.com/public-ip': '192.0.2.11',
  };
}

describe('Kubernetes', function () {
  this.timeout(30_000);

  describe('flannel annotations', function () {
    it('reads VNI and VtepMAC strictly, keeping the canonical MAC and the device name', function () {
      const ok = readBackendData({ [V4]: '{"VNI":1,"VtepMAC":"5E:89:DB:49:C6:A4"}' }, 'ipv4');
      assert.equal(ok.state, 'valid');
      assert.ok(ok.state === 'valid');
      assert.equal(ok.device, 'flannel.1');
      assert.equal(ok.mac, MAC_A);
      const v6 = readBackendData({ [V6]: backendData(MAC_V6, 4096) }, 'ipv6');
      assert.ok(v6.state === 'valid');
      assert.equal(v6.device, 'flannel-v6.4096');
    });

    it('refuses what is not a usable VTEP, and never turns it into a MAC', function () {
      const cases: [string, RegExp][] = [
        ['not json', /is not JSON/],
        ['[1,2]', /not a JSON object/],
        ['{"VtepMAC":"5e:89:db:49:c6:a4"}', /VNI missing/],
        ['{"VNI":"1","VtepMAC":"5e:89:db:49:c6:a4"}', /VNI "1"/],
        ['{"VNI":1.5,"VtepMAC":"5e:89:db:49:c6:a4"}', /VNI 1.5/],
        ['{"VNI":16777216,"VtepMAC":"5e:89:db:49:c6:a4"}', /VNI 16777216/],
        // flannel.1000000 is 15 bytes: fine; flannel-v6 would not be.
        ['{"VNI":1,"VtepMAC":"01:00:5e:00:00:01"}', /multicast/],
        ['{"VNI":1,"VtepMAC":"00:00:00:00:00:00"}', /all-zero/],
        ['{"VNI":1,"VtepMAC":"5e:89:db:49:c6"}', /not six colon-separated/],
        ['{"VNI":1}', /VtepMAC must be a string/],
      ];
      for (const [value, reason] of cases) {
        const reading = readBackendData({ [V4]: value }, 'ipv4');
        assert.equal(reading.state, 'invalid', value);
        assert.ok(reading.state === 'invalid');
        assert.match(reading.reason, reason, value);
      }
      const tooLong = readBackendData({ [V6]: backendData(MAC_A, 1_000_000) }, 'ipv6');
      assert.ok(tooLong.state === 'invalid');
      assert.match(tooLong.reason, /longer than 15 bytes/);
    });

    it('reads a missing value, JSON null or another backend type as absent', function () {
      assert.equal(readBackendData(undefined, 'ipv4').state, 'absent');
      assert.equal(readBackendData({}, 'ipv4').state, 'absent');
      assert.equal(readBackendData({ [V4]: 'null' }, 'ipv4').state, 'absent');
      const hostGw = {
        [V4]: backendData(MAC_A),
        [`${DEFAULT_ANNOTATION_PREFIX}/backend-type`]: 'host-gw',
      };
      assert.equal(readBackendData(hostGw, 'ipv4').state, 'absent');
    });

    it('writes a new VtepMAC keeping every other field and their order', function () {
      assert.equal(
        withVtepMac({ VNI: 1, VtepMAC: MAC_A, Extra: { x: 1 } }, 'D6:02:E3:DF:EA:7A'),
        `{"VNI":1,"VtepMAC":"${MAC_B}","Extra":{"x":1}}`,
      );
      assert.throws(
        () => withVtepMac({ VNI: 1, VtepMAC: MAC_A }, 'ff:ff:ff:ff:ff:ff'),
        /broadcast/,
      );
    });
  });

  describe('cluster detection', function () {
    const none = (): boolean => false;
    const token = (path: string): boolean => path === SERVICE_ACCOUNT_TOKEN;

    it('uses no cluster without a kubeconfig or a pod, whatever NODE_NAME says', function () {
      assert.equal(detectCluster({}, {}, none), null);
      assert.equal(detectCluster({}, { NODE_NAME: 'node1' }, none), null);
      assert.equal(
        detectCluster({}, { KUBECONFIG: '/k' }, none),
        null,
        'KUBECONFIG without a node name',
      );
      assert.equal(
        detectCluster({}, { KUBERNETES_SERVICE_HOST: '10.96.0.1' }, none),
        null,
        'no token',
      );
    });

    it('in a pod with NODE_NAME, from --kubeconfig, or KUBECONFIG with a node name', function () {
      assert.deepEqual(
        detectCluster({}, { KUBERNETES_SERVICE_HOST: '10.96.0.1', NODE_NAME: 'node1' }, token),
        { nodeName: 'node1', inCluster: true, via: 'in-cluster' },
      );
      assert.deepEqual(
        detectCluster({ kubeconfig: '/k', node: 'n2' }, { NODE_NAME: 'node1' }, none),
        {
          nodeName: 'n2',
          kubeconfig: '/k',
          inCluster: false,
          via: 'kubeconfig',
        },
      );
      assert.deepEqual(detectCluster({}, { KUBECONFIG: '/k', NODE_NAME: 'node1' }, token), {
        nodeName: 'node1',
        inCluster: false,
        via: 'KUBECONFIG',
      });
    });

    it('refuses incomplete settings with EINVAL errors that name options, not flags', function () {
      const refused = (option: string | undefined, message: RegExp) => (error: unknown) => {
        assert.ok(error instanceof RangeError);
        assert.equal((error as { code?: string }).code, 'EINVAL');
        assert.equal((error as { option?: string }).option, option);
        assert.match(error.message, message);
        assert.doesNotMatch(error.message, /--/, 'a library error names no CLI flag');
        return true;
      };
      assert.throws(
        () => detectCluster({ kubeconfig: '/k' }, {}, none),
        refused('kubeconfig', /option kubeconfig needs the node name: option node or NODE_NAME/),
      );
      assert.throws(
        () => detectCluster({ node: 'node1' }, {}, none),
        refused('node', /option node needs a cluster/),
      );
      assert.throws(
        () => detectCluster({}, { KUBERNETES_SERVICE_HOST: '10.96.0.1' }, token),
        refused('node', /NODE_NAME from the downward API/),
      );
      assert.throws(
        () => detectCluster({ node: 'Node_1', kubeconfig: '/k' }, {}, none),
        refused(undefined, /not a valid/),
      );
    });

    it('a kubeconfig file that cannot be used is an error about option kubeconfig (code, option, path), said once', async function () {
      const dir = mkdtempSync(join(tmpdir(), 'fg-kubeconfig-'));
      try {
        const files = {
          missing: join(dir, 'missing'),
          empty: join(dir, 'empty'),
          list: join(dir, 'list'),
          clusterless: join(dir, 'clusterless'),
        };
        writeFileSync(files.empty, ' \n');
        writeFileSync(files.list, '- 1\n- 2\n');
        writeFileSync(
          files.clusterless,
          'apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n',
        );
        const reasons: [string, RegExp][] = [
          [files.missing, /no such file$/],
          [dir, /a directory, not a file$/],
          [files.empty, /the file is empty$/],
          [files.list, /not a kubeconfig|has no current cluster/],
          [files.clusterless, /has no current cluster$/],
        ];
        for (const [file, reason] of reasons) {
          await assert.rejects(createKubernetesClient({ kubeconfig: file }), (error: unknown) => {
            assert.ok(isSystemError(error), String(error));
            assert.equal(error.code, 'EINVAL');
            assert.equal(error.option, 'kubeconfig');
            assert.equal(error.path, file);
            assert.ok(
              error.message.startsWith(`EINVAL: option kubeconfig ${file}: `),
              error.message,
            );
            assert.match(error.message, reason);
            assert.equal(
              error.message.split(file).length,
              2,
              `the file said once: ${error.message}`,
            );
            return true;
          });
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('a $KUBECONFIG that cannot be used says KUBECONFIG once, and the file when it is the file', async function () {
      const dir = mkdtempSync(join(tmpdir(), 'fg-kubeconfig-env-'));
      const saved = process.env.KUBECONFIG;
      try {
        const missing = join(dir, 'missing');
        const clusterless = join(dir, 'clusterless');
        writeFileSync(clusterless, 'apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n');
        const cases: [string, RegExp][] = [
          [missing, new RegExp(`^EINVAL: KUBECONFIG ${missing}: no such file$`)],
          [clusterless, /^EINVAL: KUBECONFIG: the kubeconfig has no current cluster$/],
        ];
        for (const [file, message] of cases) {
          process.env.KUBECONFIG = file;
          await assert.rejects(createKubernetesClient(), (error: unknown) => {
            assert.ok(isSystemError(error), String(error));
            assert.equal(error.code, 'EINVAL');
            assert.match(error.message, message);
            return true;
          });
        }
      } finally {
        if (saved === undefined) delete process.env.KUBECONFIG;
        else process.env.KUBECONFIG = saved;
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });

  describe('against the fake API server', function () {
    let fake: FakeApiServer;
    let dir: string;
    let kubeconfig: string;
    let api: KubernetesApi;
    const sources: KubernetesMacSource[] = [];
    /** What the next fake API server serves (a suite of an old cluster turns events.k8s.io off). */
    let fakeOptions: FakeApiServerOptions = {};

    beforeEach(async function () {
      fake = await FakeApiServer.start(undefined, fakeOptions);
      dir = mkdtempSync(tempDirPrefix('kube'));
      kubeconfig = fake.writeKubeconfig(dir);
      fake.addNode({ name: 'node1', annotations: flannelAnnotations(MAC_A) });
      fake.addNode({ name: 'node2', annotations: flannelAnnotations(MAC_C) });
      api = await createKubernetesClient({ kubeconfig, requestTimeoutMs: 2000 });
    });

    afterEach(async function () {
      for (const source of sources.splice(0)) source.close();
      api.close();
      await fake.close();
      rmSync(dir, { recursive: true, force: true });
    });

    function source(
      options: Partial<ConstructorParameters<typeof KubernetesMacSource>[0]> = {},
    ): KubernetesMacSource {
      const created = new KubernetesMacSource({
        api,
        nodeName: 'node1',
        backoff: { initialMs: 50, maxMs: 400 },
        ...options,
      });
      sources.push(created);
      return created;
    }

    const watches = (): { query: Record<string, string> }[] =>
      fake.requests.filter((r) => r.path === '/api/v1/nodes' && r.query.watch === 'true');
    const gets = (): unknown[] =>
      fake.requests.filter((r) => r.method === 'GET' && r.path === '/api/v1/nodes/node1');

    describe('KubernetesMacSource', function () {
      it('reads its Node, then watches it from that resourceVersion with bookmarks', async function () {
        fake.setAnnotation('node1', V6, backendData(MAC_V6));
        const s = source();
        const status = await s.waitForSync(5000);
        assert.equal(status.state, 'synced');
        assert.equal(status.problem, null);
        assert.deepEqual(status.macs, { 'flannel.1': MAC_A, 'flannel-v6.1': MAC_V6 });
        assert.equal(s.desiredMac('flannel.1'), MAC_A);
        assert.equal(s.desiredMac('flannel-v6.1'), MAC_V6);
        assert.equal(s.desiredMac('flannel.2'), undefined);
        assert.equal(s.nodeUid, (fake.node('node1').metadata as JsonObject).uid);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        const watch = watches()[0];
        assert.ok(watch);
        assert.deepEqual(watch.query, {
          allowWatchBookmarks: 'true',
          fieldSelector: 'metadata.name=node1',
          resourceVersion: (fake.node('node1').metadata as JsonObject).resourceVersion,
          timeoutSeconds: watch.query.timeoutSeconds,
          watch: 'true',
        });
        const timeout = Number(watch.query.timeoutSeconds);
        assert.ok(timeout >= 300 && timeout <= 600, `timeoutSeconds ${timeout}`);
      });

      it('follows a republished VtepMAC within one watch event, telling subscribers', async function () {
        const s = source();
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        let notified = 0;
        s.subscribe(() => (notified += 1));
        const changed = nextEvent(s, 'change');
        fake.setAnnotation('node1', V4, backendData(MAC_B));
        assert.deepEqual((await changed)[0], { 'flannel.1': MAC_B });
        assert.equal(s.desiredMac('flannel.1'), MAC_B);
        assert.equal(notified, 1);
        // Another node's change and an unrelated annotation change: no answer changes.
        fake.setAnnotation('node2', V4, backendData(MAC_A));
        fake.setAnnotation('node1', 'example.com/unrelated', 'x');
        await waitFor(() => s.status().resourceVersion === fake.resourceVersion, {
          timeoutMs: 5000,
          what: 'the unrelated change',
        });
        assert.equal(notified, 1);
        assert.equal(gets().length, 1, 'one read of the Node, the rest from the watch');
      });

      it('resumes after a dropped connection from the last bookmark, replaying what it missed', async function () {
        const s = source();
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        const restarts = collectEvents(s, 'watch');
        // Changes to another node move the store's version; a bookmark tells the watch.
        fake.setAnnotation('node2', 'example.com/x', '1');
        fake.setAnnotation('node2', 'example.com/x', '2');
        fake.sendBookmark();
        const bookmark = fake.resourceVersion;
        await waitFor(() => s.resumeVersion === bookmark, {
          timeoutMs: 5000,
          what: 'the bookmark',
        });
        fake.dropWatches();
        fake.setAnnotation('node1', V4, backendData(MAC_B)); // while disconnected
        await waitFor(() => s.desiredMac('flannel.1') === MAC_B, {
          timeoutMs: 5000,
          what: 'the change made while disconnected',
        });
        restarts.stop();
        assert.equal(restarts.events[0]?.reason, 'dropped');
        assert.ok((restarts.events[0]?.delayMs ?? 0) <= 400);
        const resumed = watches()[1];
        assert.equal(resumed?.query.resourceVersion, bookmark, 'resumed from the bookmark');
        assert.equal(gets().length, 1, 'no relist for a dropped connection');
        assert.equal(s.state, 'synced');
      });

      it('reads the Node again on 410 Gone, as an ERROR event and as an HTTP status', async function () {
        const s = source();
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        const expired = nextEvent(s, 'watch', (e) => e.reason === 'expired');
        fake.setAnnotation('node1', V4, backendData(MAC_B));
        await waitFor(() => s.desiredMac('flannel.1') === MAC_B, { timeoutMs: 5000, what: 'B' });
        fake.expireWatches();
        await expired;
        await waitFor(() => gets().length === 2 && fake.openWatches === 1, {
          timeoutMs: 5000,
          what: 'the relist and a new watch',
        });
        assert.equal(watches().at(-1)?.query.resourceVersion, fake.resourceVersion);

        // A too old version answered with an HTTP 410 (the other form).
        fake.goneAsHttpStatus = true;
        fake.compact();
        fake.setAnnotation('node2', 'example.com/x', '1');
        fake.compact();
        fake.dropWatches();
        fake.setAnnotation('node1', V4, backendData(MAC_C));
        await waitFor(() => s.desiredMac('flannel.1') === MAC_C, {
          timeoutMs: 5000,
          what: 'the value read again after HTTP 410',
        });
        assert.equal(gets().length, 3);
        assert.ok(fake.requests.some((r) => r.query.watch === 'true' && r.status === 200));
      });

      it('keeps the last known value while the API is unreachable, backs off within bounds, and recovers', async function () {
        const s = source({ random: () => 1 });
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        let notified = 0;
        s.subscribe(() => (notified += 1));
        const restarts = collectEvents(s, 'watch');
        const degraded = nextEvent(s, 'state', (st) => st.state === 'degraded');
        await fake.stop();
        const [status] = await degraded;
        assert.equal(status.problem, 'api-unreachable');
        assert.match(
          status.message ?? '',
          /^watch node node1: .*(ECONNREFUSED|socket hang up|ECONNRESET)/,
        );
        assert.equal(s.desiredMac('flannel.1'), MAC_A, 'the last known value');
        await waitFor(() => restarts.events.length >= 5, { timeoutMs: 5000, what: 'retries' });
        const delays = restarts.events.map((e: WatchRestartEvent) => e.delayMs);
        // 50, 100, 200, 400, 400 ... doubling, capped, then +20 % (the jitter at its top,
        // core/backoff.ts): the cap bounds the delay before its jitter.
        assert.deepEqual(delays.slice(1, 5), [120, 240, 480, 480]);
        const synced = nextEvent(s, 'state', (st) => st.state === 'synced', 5000);
        await fake.restart();
        await synced;
        restarts.stop();
        assert.ok(notified >= 1, 'subscribers told after the outage');
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch again' });
        fake.setAnnotation('node1', V4, backendData(MAC_B));
        await waitFor(() => s.desiredMac('flannel.1') === MAC_B, { timeoutMs: 5000, what: 'B' });
      });

      it('keeps the last valid value when the annotation becomes invalid or disappears', async function () {
        const s = source();
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        const states = collectEvents(s, 'state');
        fake.setAnnotation('node1', V4, '{"VNI":1,"VtepMAC":"ff:ff:ff:ff:ff:ff"}');
        await waitFor(() => s.state === 'degraded', { timeoutMs: 5000, what: 'degraded' });
        assert.equal(s.status().problem, 'annotation-invalid');
        assert.match(s.status().message ?? '', /broadcast.*keeping the last valid value/);
        assert.equal(s.desiredMac('flannel.1'), MAC_A);
        fake.setAnnotation('node1', V4, null);
        await waitFor(() => s.status().problem === 'annotation-missing', {
          timeoutMs: 5000,
          what: 'missing',
        });
        assert.equal(s.desiredMac('flannel.1'), MAC_A);
        fake.setAnnotation('node1', V4, backendData(MAC_B));
        await waitFor(() => s.state === 'synced', { timeoutMs: 5000, what: 'synced' });
        assert.equal(s.desiredMac('flannel.1'), MAC_B);
        states.stop();
        assert.deepEqual(
          states.events.map((st: SourceStatus) => `${st.state}:${st.problem ?? ''}`),
          ['degraded:annotation-invalid', 'degraded:annotation-missing', 'synced:'],
        );
      });

      it('declares itself degraded when the first read does not answer in time, then syncs by itself', async function () {
        fake.hang({ method: 'GET', path: /^\/api\/v1\/nodes\/node1$/ });
        const hungApi = await createKubernetesClient({ kubeconfig, requestTimeoutMs: 500 });
        try {
          const s = source({ api: hungApi });
          const status = await s.waitForSync(200);
          assert.equal(status.state, 'degraded');
          assert.equal(status.problem, 'api-unreachable');
          assert.match(
            status.message ?? '',
            /no answer from https:\/\/127\.0\.0\.1:\d+ within 200 ms/,
          );
          assert.equal(
            s.desiredMac('flannel.1'),
            undefined,
            'no value yet: the guard pins first-seen',
          );
          await waitFor(() => s.state === 'synced', {
            timeoutMs: 5000,
            what: 'synced after the timeout',
          });
          assert.equal(s.desiredMac('flannel.1'), MAC_A);
        } finally {
          hungApi.close();
        }
      });

      it('reports a node that does not exist and a refused token', async function () {
        const missing = source({ nodeName: 'node9' });
        const status = await missing.waitForSync(300);
        assert.equal(status.problem, 'node-not-found');
        assert.match(status.message ?? '', /404 NotFound: nodes "node9" not found/);
        const badKubeconfig = fake.writeKubeconfig(dir, 'bad');
        writeFileSync(
          badKubeconfig,
          readFileSync(badKubeconfig, 'utf8').replace(fake.token, 'wrong'),
        );
        const badApi = await createKubernetesClient({ kubeconfig: badKubeconfig });
        try {
          const refused = await source({ api: badApi }).waitForSync(300);
          assert.equal(refused.problem, 'unauthorized');
          assert.match(refused.message ?? '', /401 Unauthorized/);
        } finally {
          badApi.close();
        }
      });

      it('adopt: a merge patch of that one annotation with a resourceVersion precondition, other fields kept', async function () {
        fake.setAnnotation('node1', V4, '{"VNI":1,"VtepMAC":"5e:89:db:49:c6:a4","Extra":"kept"}');
        const s = source();
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        const before = fake.node('node1').metadata as JsonObject;
        const changes = collectEvents(s, 'change');
        const adopted = nextEvent(s, 'adopt');
        await s.adopt('flannel.1', MAC_B);
        assert.equal(s.desiredMac('flannel.1'), MAC_B, 'answered from the patch response');
        const patch = fake.requests.find((r) => r.method === 'PATCH');
        assert.ok(patch);
        assert.equal(patch.path, '/api/v1/nodes/node1');
        assert.equal(patch.contentType, 'application/merge-patch+json');
        assert.equal(patch.query.fieldManager, 'flannel-guard');
        assert.deepEqual(patch.body, {
          metadata: {
            resourceVersion: before.resourceVersion,
            annotations: { [V4]: `{"VNI":1,"VtepMAC":"${MAC_B}","Extra":"kept"}` },
          },
        });
        const annotations = fake.annotations('node1');
        assert.deepEqual(annotations, {
          ...(before.annotations as Record<string, string>),
          [V4]: `{"VNI":1,"VtepMAC":"${MAC_B}","Extra":"kept"}`,
        });
        const [event] = await adopted;
        assert.equal(event.result, 'stored');
        assert.equal(event.previous, MAC_A);
        assert.equal(event.conflicts, 0);
        // The watch then delivers the change: nothing flips back.
        await waitFor(() => s.status().resourceVersion === fake.resourceVersion, {
          timeoutMs: 5000,
          what: 'the watch catching up',
        });
        changes.stop();
        assert.deepEqual(changes.events, [{ 'flannel.1': MAC_B }]);
        // Adopting the stored value again writes nothing.
        const patches = fake.requests.filter((r) => r.method === 'PATCH').length;
        await s.adopt('flannel.1', MAC_B);
        assert.equal(fake.requests.filter((r) => r.method === 'PATCH').length, patches);
      });

      it('adopt: retried on 409 Conflict from a fresh read, keeping the concurrent change', async function () {
        const s = source();
        await s.waitForSync(5000);
        // flanneld (or kubelet) updates the Node between our read and our patch.
        fake.beforeNextPatch(() => {
          fake.setAnnotation('node1', 'flannel.alpha.coreos.com/public-ip', '192.0.2.99');
        });
        const adopted = nextEvent(s, 'adopt');
        await s.adopt('flannel.1', MAC_C);
        const statuses = fake.requests.filter((r) => r.method === 'PATCH').map((r) => r.status);
        assert.deepEqual(statuses, [409, 200]);
        const [event] = await adopted;
        assert.equal(event.conflicts, 1);
        assert.equal(event.attempts, 2);
        const annotations = fake.annotations('node1');
        assert.equal(annotations['flannel.alpha.coreos.com/public-ip'], '192.0.2.99');
        assert.equal(annotations[V4], backendData(MAC_C));
      });

      it('adopt: refuses to write into an invalid annotation; a failed write answers the stored value again', async function () {
        const s = source();
        await s.waitForSync(5000);
        await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
        await assert.rejects(s.adopt('flannel.9', MAC_B), /nothing to adopt into/);
        await assert.rejects(s.adopt('flannel.1', 'not a mac'), /not six colon-separated/);
        let notified = 0;
        s.subscribe(() => (notified += 1));
        fake.fail({ method: 'PATCH' }, 403);
        const pending = s.adopt('flannel.1', MAC_B);
        assert.equal(s.desiredMac('flannel.1'), MAC_B, 'answered while the patch is in flight');
        await assert.rejects(pending, /403 Forbidden/);
        assert.equal(s.desiredMac('flannel.1'), MAC_A, 'the stored value again');
        assert.equal(notified, 1, 'subscribers told, so the guard reverts the device');
        fake.setAnnotation('node1', V4, 'garbage');
        await waitFor(() => s.state === 'degraded', { timeoutMs: 5000, what: 'invalid' });
        const patches = fake.requests.filter((r) => r.method === 'PATCH').length;
        await assert.rejects(s.adopt('flannel.1', MAC_B), /is invalid .*not writing it/);
        assert.equal(fake.requests.filter((r) => r.method === 'PATCH').length, patches);
      });
    });

    describe('NodeConditionReporter', function () {
      /** A guard that reports the devices a test sets, and emits what the test emits. */
      function fakeGuard(): {
        guard: FlannelGuard;
        devices: DeviceStatus[];
        emit: (name: string) => void;
      } {
        const devices: DeviceStatus[] = [];
        const emitter = new EventEmitter();
        const guard = Object.assign(emitter, { status: () => devices.map((d) => ({ ...d })) });
        // The reporter reads status() on every event; what the event carries is not used.
        return {
          guard: guard as unknown as FlannelGuard,
          devices,
          emit: (name) => emitter.emit(name),
        };
      }
      const device = (mac: string, contested = false): DeviceStatus => ({
        name: 'flannel.1',
        ifindex: 4,
        mac,
        desiredMac: MAC_A,
        macSource: 'source',
        addrAssignType: 3,
        offloads: {},
        neighbours: 2,
        contested,
      });
      const conditionOf = (node: string, type: string): JsonObject | undefined =>
        (((fake.node(node).status as JsonObject).conditions ?? []) as JsonObject[]).find(
          (c) => c.type === type,
        );
      /** The condition, after checking that the type written before says the same. */
      const condition = (): JsonObject | undefined => {
        const written = conditionOf('node1', NODE_CONDITION_TYPE);
        const legacy = conditionOf('node1', LEGACY_NODE_CONDITION_TYPE);
        assert.deepEqual(
          legacy && { ...legacy, type: NODE_CONDITION_TYPE },
          written,
          `${LEGACY_NODE_CONDITION_TYPE} is written beside it, the same`,
        );
        return written;
      };

      it('True while healthy; False only for a drift that lasts or a contest; kubelet conditions kept', async function () {
        const { guard, devices, emit } = fakeGuard();
        devices.push(device(MAC_A));
        const health = new VtepHealth({ driftGraceMs: 100 });
        const reporter = new NodeConditionReporter({ api, nodeName: 'node1', health });
        const written: NodeConditionValue[] = [];
        reporter.on('written', (e) => written.push(e.condition));
        health.attach(guard);
        reporter.start();
        await reporter.settled();
        assert.deepEqual([condition()?.status, condition()?.reason], ['True', 'VtepHealthy']);
        const conditions = (fake.node('node1').status as JsonObject).conditions as JsonObject[];
        assert.ok(
          conditions.some((c) => c.type === 'Ready'),
          "kubelet's Ready stays",
        );
        const patch = fake.requests.find((q) => q.path === '/api/v1/nodes/node1/status');
        assert.equal(patch?.contentType, 'application/strategic-merge-patch+json');

        // A rewrite corrected at once never shows.
        devices[0] = device(MAC_B);
        emit('rewrite');
        devices[0] = device(MAC_A);
        emit('restored');
        await reporter.settled();
        assert.equal(written.length, 1);

        // One that stays past the grace does.
        devices[0] = device(MAC_B);
        emit('rewrite');
        await reporter.settled();
        assert.equal(condition()?.status, 'True', 'not yet');
        await waitFor(() => condition()?.status === 'False', { timeoutMs: 3000, what: 'False' });
        assert.equal(condition()?.reason, 'VtepMacDrifted');
        assert.match(String(condition()?.message), new RegExp(`flannel\\.1 has MAC ${MAC_B}`));
        const transition = condition()?.lastTransitionTime;

        devices[0] = device(MAC_B, true);
        emit('contested');
        await reporter.settled();
        assert.equal(condition()?.reason, 'VtepContested');
        assert.equal(condition()?.lastTransitionTime, transition, 'still False: no transition');

        devices[0] = device(MAC_A);
        emit('resumed');
        await reporter.settled();
        assert.deepEqual([condition()?.status, condition()?.reason], ['True', 'VtepHealthy']);
        assert.deepEqual(
          written.map((c) => c.reason),
          ['VtepHealthy', 'VtepMacDrifted', 'VtepContested', 'VtepHealthy'],
        );
        reporter.close();
        health.close();
      });

      it('a failed write is written again with the next change', async function () {
        const { guard, devices, emit } = fakeGuard();
        devices.push(device(MAC_A));
        const health = new VtepHealth({ driftGraceMs: 0 });
        const reporter = new NodeConditionReporter({ api, nodeName: 'node1', health });
        const failed: string[] = [];
        reporter.on('failed', (e) => failed.push(e.error));
        fake.fail({ method: 'PATCH', path: /\/status$/ }, 403, 1);
        health.attach(guard);
        reporter.start();
        await reporter.settled();
        assert.equal(failed.length, 1);
        assert.match(failed[0] ?? '', /403/);
        assert.equal(condition(), undefined);
        emit('ready');
        await reporter.settled();
        assert.equal(condition()?.status, 'True', JSON.stringify(condition()));
        reporter.close();
        health.close();
      });

      it('deploy/readiness: the NodeReadinessRule gates on the condition the guard writes; a node without it is not tainted', async function () {
        const k8s = await loadClientNode();
        const [rule] = k8s.loadAllYaml(
          readFileSync(
            join(__dirname, '..', '..', 'deploy', 'readiness', 'node-readiness-rule.yaml'),
            'utf8',
          ),
        ) as {
          apiVersion: string;
          kind: string;
          spec: {
            conditions: { type: string; requiredStatus: string; defaultStatus?: string }[];
            taint: { key: string; effect: string };
            enforcementMode: string;
          };
        }[];
        assert.ok(rule);
        assert.equal(rule.apiVersion, 'readiness.node.x-k8s.io/v1alpha1');
        assert.equal(rule.kind, 'NodeReadinessRule');
        assert.equal(rule.spec.enforcementMode, 'continuous');
        assert.deepEqual(rule.spec.taint, {
          key: 'flannel-guard.io/vtep-unhealthy',
          effect: 'NoSchedule',
        });
        const [gate] = rule.spec.conditions;
        assert.ok(gate && rule.spec.conditions.length === 1);
        assert.equal(gate.type, NODE_CONDITION_TYPE);
        // node-readiness-controller's rule: a missing condition takes defaultStatus; the taint
        // stays off while the status is the required one.
        const tainted = (node: string): boolean =>
          (conditionOf(node, gate.type)?.status ?? gate.defaultStatus) !== gate.requiredStatus;
        assert.equal(tainted('node2'), false, 'a node the guard never reported on (problem gate)');

        const { guard, devices, emit } = fakeGuard();
        devices.push(device(MAC_A));
        const health = new VtepHealth({ driftGraceMs: 0 });
        const reporter = new NodeConditionReporter({ api, nodeName: 'node1', health });
        health.attach(guard);
        reporter.start();
        await reporter.settled();
        assert.equal(tainted('node1'), false, 'healthy');
        devices[0] = device(MAC_B, true);
        emit('contested');
        await reporter.settled();
        assert.equal(tainted('node1'), true, 'contested');
        devices[0] = device(MAC_A);
        emit('resumed');
        await reporter.settled();
        assert.equal(tainted('node1'), false, 'healthy again');
        reporter.close();
        health.close();
      });

      it("/vtep: 200 only while the guard is ready and its VTEPs healthy (a readiness reporter's endpoint)", async function () {
        const { guard, devices, emit } = fakeGuard();
        devices.push(device(MAC_A));
        const health = new GuardHealth();
        health.attachGuard(guard);
        const server = await startMetricsServer({
          address: { host: '127.0.0.1', port: 0 },
          metrics: () => Promise.resolve(''),
          contentType: 'text/plain',
          health,
        });
        const vtep = async (): Promise<{ status: number; body: JsonObject }> => {
          health.vtep.settle();
          const answer = await get(`http://${server.endpoint}/vtep`);
          return { status: answer.status, body: JSON.parse(answer.body) as JsonObject };
        };
        try {
          const starting = await vtep();
          assert.equal(starting.status, 503, 'not before the guard has taken on its devices');
          assert.equal(starting.body.guard, 'starting');
          emit('ready');
          const healthy = await vtep();
          assert.equal(healthy.status, 200);
          assert.deepEqual(healthy.body.condition, {
            status: 'True',
            reason: 'VtepHealthy',
            message: 'flannel.1 at the published MAC, not contested',
          });
          devices[0] = device(MAC_B, true);
          emit('contested');
          const contested = await vtep();
          assert.equal(contested.status, 503);
          assert.equal((contested.body.condition as JsonObject).reason, 'VtepContested');
          devices[0] = device(MAC_A);
          emit('resumed');
          assert.equal((await vtep()).status, 200);
          emit('close');
          assert.equal((await vtep()).status, 503, 'stopped');
        } finally {
          await server.close();
          health.close();
        }
      });

      it('vtepCondition: contested wins over drifted; no device is healthy', function () {
        const drifted = { ...device(MAC_B), name: 'flannel.2' };
        assert.equal(
          vtepCondition([drifted, device(MAC_A, true)], () => true).reason,
          'VtepContested',
        );
        assert.equal(vtepCondition([drifted], () => true).reason, 'VtepMacDrifted');
        assert.equal(vtepCondition([drifted], () => false).reason, 'VtepHealthy');
        assert.match(vtepCondition([], () => true).message, /no VXLAN device/);
        const measured = { ...device(MAC_A), offloads: { 'tx-checksum-ip-generic': true } };
        assert.equal(
          vtepCondition([{ ...measured, offloadVerdict: 'broken' }], () => false).reason,
          'VtepOffloadBroken',
        );
        const fixed = {
          ...measured,
          offloadVerdict: 'broken' as const,
          offloads: { 'tx-checksum-ip-generic': false },
        };
        assert.equal(vtepCondition([fixed], () => false).reason, 'VtepHealthy');
      });
    });

    describe('EventRecorder: events.k8s.io/v1', function () {
      const node = (): ReturnType<typeof nodeReference> =>
        nodeReference('node1', (fake.node('node1').metadata as JsonObject).uid as string);

      it("creates an events.k8s.io/v1 Event (the group's required fields, none of core's) and patches its series on a repeat", async function () {
        const r = new EventRecorder({ api, host: 'node1', retryInitialMs: 20 });
        const recorded: RecordedEvent[] = [];
        r.on('recorded', (e) => recorded.push(e));
        r.record(node(), 'Warning', EVENT_REASONS.rewrite, 'flannel.1 has MAC x');
        assert.equal(await r.flush(5000), true);
        assert.deepEqual(fake.events(), [], 'nothing through core/v1');
        const [stored] = fake.eventsV1();
        assert.ok(stored);
        assert.equal(stored.apiVersion, 'events.k8s.io/v1');
        assert.equal((stored.metadata as JsonObject).namespace, 'default');
        assert.deepEqual(stored.regarding, {
          kind: 'Node',
          apiVersion: 'v1',
          name: 'node1',
          uid: (fake.node('node1').metadata as JsonObject).uid,
        });
        assert.equal(stored.note, 'flannel.1 has MAC x');
        assert.equal(stored.reason, 'VtepMacRewritten');
        assert.equal(stored.action, 'Detected');
        assert.equal(stored.type, 'Warning');
        assert.equal(stored.reportingController, 'flannel-guard');
        assert.equal(stored.reportingInstance, 'node1');
        assert.match(stored.eventTime as string, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
        for (const core of ['involvedObject', 'message', 'count', 'source', 'firstTimestamp']) {
          assert.equal(stored[core], undefined, core);
        }
        assert.equal(stored.series, undefined, 'a first occurrence has no series');
        assert.equal(recorded[0]?.stored.api, 'events.k8s.io/v1');

        for (let i = 0; i < 2; i += 1) {
          r.record(node(), 'Warning', EVENT_REASONS.rewrite, 'flannel.1 has MAC x');
        }
        await r.flush(5000);
        assert.equal(fake.eventsV1().length, 1, 'the same Event');
        const series = fake.eventsV1()[0]?.series as JsonObject;
        assert.equal(series.count, 3);
        assert.match(series.lastObservedTime as string, /\.\d{6}Z$/);
        assert.equal(fake.eventsV1()[0]?.eventTime, stored.eventTime, 'eventTime stays the first');
        const patch = fake.requests.filter((q) => q.method === 'PATCH').at(-1);
        assert.match(
          patch?.path ?? '',
          /^\/apis\/events\.k8s\.io\/v1\/namespaces\/default\/events\//,
        );
        assert.equal(recorded.at(-1)?.action, 'patched');
        r.close();
      });

      it('records what --offload auto changed (VtepOffloadBroken with the measurement), not a verdict that changed nothing', async function () {
        const r = new EventRecorder({ api, host: 'node1', retryInitialMs: 20 });
        const guard = new EventEmitter() as unknown as FlannelGuard;
        const stop = recordGuardEvents(guard, r, { involvedObject: node });
        guard.emit('verdict', verdictEvent('kept-on'));
        guard.emit('verdict', verdictEvent('turned-off'));
        assert.equal(await r.flush(5000), true);
        stop();
        const events = fake.eventsV1();
        assert.deepEqual(
          events.map((e) => [e.reason, e.type, e.action]),
          [['VtepOffloadBroken', 'Warning', 'DisabledOffload']],
        );
        assert.match(
          String(events[0]?.note),
          /tx-checksum-ip-generic turned off: .* \(4 probe rounds, 12 probes\)/,
        );
        r.close();
      });

      it('records checksum errors when they start rising (ChecksumErrorsReceived), not every rise', async function () {
        const r = new EventRecorder({ api, host: 'node1', retryInitialMs: 20 });
        const guard = new EventEmitter() as unknown as FlannelGuard;
        const stop = recordGuardEvents(guard, r, { involvedObject: node });
        const rise = (onset: boolean, udp: number): ChecksumErrorsEvent => ({
          netns: null,
          rise: { udp, tcp: 0, udp6: 0 },
          totals: { udp: 10 + udp, tcp: 0, udp6: 0 },
          intervalMs: 2000,
          onset,
          recheck: onset ? ['flannel.1'] : [],
        });
        guard.emit('checksumErrors', rise(true, 3));
        guard.emit('checksumErrors', rise(false, 5));
        assert.equal(await r.flush(5000), true);
        stop();
        const events = fake.eventsV1();
        assert.deepEqual(
          events.map((e) => [e.reason, e.type, e.action]),
          [['ChecksumErrorsReceived', 'Warning', 'Detected']],
        );
        assert.match(
          String(events[0]?.note),
          /^3 UDP packets with bad checksums received in 2\.0 s and dropped: .*; the offload of flannel\.1 is measured again now$/,
        );
        r.close();
      });

      it('names the node that sends bad checksums (ChecksumErrorsFromPeer), by its addresses when nodes may not be listed', async function () {
        const senders: ChecksumSendersEvent = {
          netns: null,
          device: 'flannel.1',
          frames: 40,
          checked: 30,
          bad: 6,
          sampleMs: 1000,
          senders: [
            { mac: MAC_C, vtep: '198.18.2.0', underlay: '192.0.2.12', udp: 3, tcp: 2 },
            { mac: '0e:00:00:00:00:99', vtep: null, underlay: null, udp: 1, tcp: 0 },
          ],
        };
        const notes = async (peerNodes: PeerNodes): Promise<string[]> => {
          const r = new EventRecorder({ api, host: 'node1', retryInitialMs: 20 });
          const guard = new EventEmitter() as unknown as FlannelGuard;
          const stop = recordGuardEvents(guard, r, { involvedObject: node, peerNodes });
          guard.emit('checksumSenders', senders);
          await waitFor(() => fake.eventsV1().length >= 2, {
            timeoutMs: 5000,
            what: 'two ChecksumErrorsFromPeer Events',
          });
          assert.equal(await r.flush(5000), true);
          stop();
          r.close();
          const events = fake.eventsV1().filter((e) => e.reason === 'ChecksumErrorsFromPeer');
          assert.ok(events.every((e) => e.type === 'Warning' && e.action === 'Detected'));
          return events.map((e) => String(e.note)).sort();
        };
        assert.deepEqual(await notes(new PeerNodes({ api })), [
          `flannel.1: packets with bad checksums from an unknown peer (0e:00:00:00:00:99): 1 UDP in a 1.0 s sample; its TX checksum offload is broken: turn tx-checksum-ip-generic off there (--offload auto does it)`,
          `flannel.1: packets with bad checksums from node node2: VTEP 198.18.2.0 (underlay 192.0.2.12, ${MAC_C}): 3 UDP, 2 TCP in a 1.0 s sample; its TX checksum offload is broken: turn tx-checksum-ip-generic off there (--offload auto does it)`,
        ]);
        // Without `list` on nodes (the base RBAC): the same Events, named by addresses; said once.
        fake.fail({ method: 'GET', path: /^\/api\/v1\/nodes$/ }, 403, 10);
        const problems: { forbidden: boolean }[] = [];
        const refused = new PeerNodes({ api, onProblem: (p) => problems.push(p) });
        assert.equal(await refused.nodeFor(MAC_C), null);
        assert.equal(await refused.nodeFor(MAC_C), null);
        assert.deepEqual(
          problems.map((p) => p.forbidden),
          [true],
        );
        assert.equal(
          fake.requests.filter((q) => q.method === 'GET' && q.path === '/api/v1/nodes').length,
          2,
          'one listing for the first notes, one refused; none after the refusal',
        );
      });

      it('PeerNodes: pages of 100 through continue, one listing for ten minutes, another after', async function () {
        for (let i = 0; i < 2 * PEER_NODES_PAGE + 30; i += 1) {
          const mac = `0e:00:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 0xff).toString(16).padStart(2, '0')}`;
          fake.addNode({ name: `peer-${i}`, annotations: flannelAnnotations(mac) });
        }
        fake.addNode({ name: 'not-flannel', annotations: { [V4]: 'not json' } });
        let now = 0;
        const peers = new PeerNodes({ api, now: () => now });
        const lists = () =>
          fake.requests.filter((q) => q.method === 'GET' && q.path === '/api/v1/nodes');
        assert.equal(await peers.nodeFor('0e:00:00:00:00:e5'), 'peer-229');
        assert.equal(await peers.nodeFor(MAC_A), 'node1');
        assert.equal(await peers.nodeFor('0e:00:00:00:ff:ff'), null);
        assert.deepEqual(
          lists().map((q) => [q.query.limit, q.query.continue === undefined]),
          [
            ['100', true],
            ['100', false],
            ['100', false],
          ],
        );
        now += 10 * 60_000;
        fake.deleteNode('peer-229');
        assert.equal(await peers.nodeFor('0e:00:00:00:00:e5'), null);
        assert.equal(lists().length, 6);
      });

      it('cuts a note to the 1 kB the group allows, on a character boundary', async function () {
        const r = new EventRecorder({ api, host: 'node1', retryInitialMs: 20 });
        const dropped: DroppedEvent[] = [];
        r.on('dropped', (e) => dropped.push(e));
        r.record(node(), 'Normal', EVENT_REASONS.restored, 'é'.repeat(1000));
        assert.equal(await r.flush(5000), true);
        assert.deepEqual(dropped, []);
        const note = fake.eventsV1()[0]?.note as string;
        assert.ok(Buffer.byteLength(note) <= 1024, `${Buffer.byteLength(note)} bytes`);
        assert.match(note, /^é+\.\.\.$/);
        r.close();
      });
    });

    describe('EventRecorder: an API server without events.k8s.io/v1 (core/v1 Events)', function () {
      before(function () {
        fakeOptions = { eventsV1: false };
      });
      after(function () {
        fakeOptions = {};
      });

      it('asks events.k8s.io/v1 once, then stays with core/v1', async function () {
        const r = new EventRecorder({ api, host: 'node1', retryInitialMs: 20 });
        const recorded: RecordedEvent[] = [];
        r.on('recorded', (e) => recorded.push(e));
        for (const reason of [
          EVENT_REASONS.rewrite,
          EVENT_REASONS.restored,
          EVENT_REASONS.adopted,
        ]) {
          r.record(nodeReference('node1', 'uid'), 'Normal', reason, reason);
        }
        assert.equal(await r.flush(5000), true);
        assert.equal(fake.events().length, 3);
        assert.deepEqual(
          recorded.map((e) => e.stored.api),
          ['v1', 'v1', 'v1'],
        );
        const asked = fake.requests.filter((q) => q.path.startsWith('/apis/events.k8s.io/'));
        assert.equal(asked.length, 1, JSON.stringify(asked.map((q) => q.path)));
        r.close();
      });

      function recorder(options: Partial<ConstructorParameters<typeof EventRecorder>[0]> = {}): {
        recorder: EventRecorder;
        recorded: RecordedEvent[];
        dropped: DroppedEvent[];
      } {
        const created = new EventRecorder({ api, host: 'node1', retryInitialMs: 20, ...options });
        const recorded: RecordedEvent[] = [];
        const dropped: DroppedEvent[] = [];
        created.on('recorded', (e) => recorded.push(e));
        created.on('dropped', (e) => dropped.push(e));
        return { recorder: created, recorded, dropped };
      }
      const node = (): ReturnType<typeof nodeReference> =>
        nodeReference('node1', (fake.node('node1').metadata as JsonObject).uid as string);

      it('creates a core/v1 Event on the Node like kubelet, and patches count on an identical repeat', async function () {
        const { recorder: r, recorded } = recorder();
        r.record(
          node(),
          'Warning',
          EVENT_REASONS.rewrite,
          'flannel.1 has MAC x; the other nodes use y',
        );
        assert.equal(await r.flush(5000), true);
        const [stored] = fake.events();
        assert.ok(stored);
        const meta = stored.metadata as JsonObject;
        assert.equal(meta.namespace, 'default');
        assert.match(meta.name as string, /^node1\.[0-9a-f]+$/);
        assert.deepEqual(stored.involvedObject, {
          kind: 'Node',
          apiVersion: 'v1',
          name: 'node1',
          uid: (fake.node('node1').metadata as JsonObject).uid,
        });
        assert.equal(stored.reason, 'VtepMacRewritten');
        assert.equal(stored.type, 'Warning');
        assert.equal(stored.count, 1);
        assert.deepEqual(stored.source, { component: 'flannel-guard', host: 'node1' });
        assert.equal(stored.reportingComponent, 'flannel-guard');
        assert.equal(stored.reportingInstance, 'node1');
        assert.match(stored.firstTimestamp as string, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
        assert.equal(stored.firstTimestamp, stored.lastTimestamp);

        r.record(
          node(),
          'Warning',
          EVENT_REASONS.rewrite,
          'flannel.1 has MAC x; the other nodes use y',
        );
        await r.flush(5000);
        assert.equal(fake.events().length, 1, 'the same Event');
        assert.equal(fake.events()[0]?.count, 2);
        const patch = fake.requests.filter((q) => q.method === 'PATCH').at(-1);
        assert.equal(patch?.contentType, 'application/strategic-merge-patch+json');
        assert.deepEqual(Object.keys(patch?.body as object).sort(), [
          'count',
          'lastTimestamp',
          'message',
        ]);
        assert.deepEqual(
          recorded.map((e) => e.action),
          ['created', 'patched'],
        );
      });

      it('combines more than 10 similar events within 10 minutes, and creates again an expired one', async function () {
        const { recorder: r } = recorder();
        for (let i = 0; i < 12; i += 1) {
          r.record(
            node(),
            'Warning',
            EVENT_REASONS.rewrite,
            `flannel.1 has MAC 02:00:00:00:00:${String(i).padStart(2, '0')}`,
          );
        }
        await r.flush(10_000);
        const events = fake.events();
        // 9 distinct, then one combined event patched for the 11th and 12th.
        assert.equal(events.length, 10);
        const combined = events.at(-1);
        assert.match(
          combined?.message as string,
          /^\(combined from similar events\): flannel\.1 has MAC 02:00:00:00:00:11$/,
        );
        assert.equal(combined?.count, 3);

        // An Event that expired (its TTL) is created again under its name.
        const single = recorder();
        single.recorder.record(node(), 'Normal', EVENT_REASONS.restored, 'expired one');
        await single.recorder.flush(5000);
        fake.expireEvents();
        single.recorder.record(node(), 'Normal', EVENT_REASONS.restored, 'expired one');
        await single.recorder.flush(5000);
        assert.deepEqual(
          single.recorded.map((e) => e.action),
          ['created', 'created'],
        );
      });

      it('rate-limits per object like client-go (burst 25, one more every 5 minutes)', async function () {
        let now = Date.parse('2025-01-01T00:00:00Z');
        const { recorder: r, dropped } = recorder({ now: () => now });
        for (let i = 0; i < 30; i += 1) r.record(node(), 'Normal', `Reason${i}`, 'same');
        await r.flush(10_000);
        assert.equal(fake.events().length, 25);
        assert.equal(dropped.filter((d) => d.reason === 'spam').length, 5);
        now += 300_000;
        r.record(node(), 'Normal', 'Later', 'one more');
        r.record(node(), 'Normal', 'Later2', 'not yet');
        await r.flush(5000);
        assert.equal(fake.events().length, 26);
      });

      it('retries transport failures and 5xx, drops what the API refuses', async function () {
        const { recorder: r, recorded, dropped } = recorder();
        fake.fail({ method: 'POST' }, 503, 2);
        r.record(node(), 'Normal', 'Retried', 'after two 503s');
        await r.flush(5000);
        assert.equal(recorded.length, 1);
        fake.fail({ method: 'POST' }, 403, 1);
        r.record(node(), 'Normal', 'Refused', 'forbidden');
        await r.flush(5000);
        assert.equal(dropped.length, 1);
        assert.equal(dropped[0]?.reason, 'rejected');
        assert.match(dropped[0]?.error ?? '', /403/);
        const posts = fake.requests.filter((q) => q.method === 'POST').map((q) => q.status);
        // Retried through events.k8s.io/v1, which this server then answers 404: core/v1.
        assert.deepEqual(posts.slice(0, 4), [503, 503, 404, 201]);
      });

      it("records the guard's rewrite, restored, adopted and contested events with both MACs and the cause", async function () {
        const { recorder: r } = recorder();
        const guard = new EventEmitter() as unknown as FlannelGuard;
        const stop = recordGuardEvents(guard, r, { involvedObject: node });
        const rewritten = rewriteEvent('flannel.1', MAC_B, MAC_A, 'udev');
        guard.emit('rewrite', rewritten);
        guard.emit('restored', {
          device: 'flannel.1',
          ifindex: 4,
          mac: MAC_A,
          neighbours: 2,
          latencyMs: 1,
          deferred: false,
        });
        guard.emit('adopted', {
          device: 'flannel.1',
          ifindex: 4,
          mac: MAC_B,
          previous: MAC_A,
          neighbours: 2,
          latencyMs: 5,
        });
        guard.emit('contested', {
          device: 'flannel.1',
          ifindex: 4,
          what: 'mac',
          expected: MAC_A,
          observed: MAC_B,
          rewrites: 5,
          windowMs: 60000,
          quietMs: 300000,
          detail: `flannel.1 rewritten 5 times (now ${MAC_B}, expected ${MAC_A})`,
        });
        guard.emit('shared', { device: 'flannel.1', others: 1, detail: 'another guard' });
        guard.emit('shared', { device: 'flannel.1', others: 0, detail: 'alone again' });
        stop();
        await r.flush(5000);
        const byReason = new Map(fake.events().map((e) => [e.reason as string, e]));
        const rewrite = byReason.get('VtepMacRewritten');
        assert.equal(rewrite?.type, 'Warning');
        assert.equal(
          rewrite?.message,
          `flannel.1 has MAC ${MAC_B}; the other nodes use ${MAC_A}. Written by udev-persistent-policy: systemd-udevd MACAddressPolicy=persistent (/usr/lib/systemd/network/99-default.link, udev-database): ${MAC_B} is siphash24(machine-id from /etc/machine-id + name) under udev's key; a .link file with MACAddressPolicy=none prevents it`,
        );
        assert.equal(rewritten.writer, 'udev-persistent-policy');
        assert.equal(
          byReason.get('VtepMacRestored')?.message,
          `flannel.1 MAC set back to ${MAC_A} from ${MAC_B}; 2 permanent neighbour entries restored`,
        );
        assert.match(
          byReason.get('VtepMacAdopted')?.message as string,
          new RegExp(
            `keeps MAC ${MAC_B} instead of ${MAC_A}: flannel.alpha.coreos.com/backend-data now publishes`,
          ),
        );
        assert.equal(byReason.get('VtepMacContested')?.type, 'Warning');
        // A second guard is an Event when it appears; its going is in the log and metrics.
        assert.equal(byReason.get('VtepGuardedTwice')?.message, 'another guard');
        assert.equal(fake.events().filter((e) => e.reason === 'VtepGuardedTwice').length, 1);
      });
    });
  });

  describe('metrics and health', function () {
    function fakeGuard(): FlannelGuard & EventEmitter {
      const guard = new EventEmitter() as unknown as FlannelGuard & EventEmitter;
      Object.assign(guard, {
        status: () => [{}, {}],
        checksumErrors: (): ChecksumErrorCounters => ({ udp: 4, tcp: 2, udp6: null }),
      });
      return guard;
    }

    it('parses listen addresses', function () {
      assert.deepEqual(parseListenAddress('127.0.0.1:9464'), { host: '127.0.0.1', port: 9464 });
      assert.deepEqual(parseListenAddress('[::1]:0'), { host: '::1', port: 0 });
      assert.deepEqual(parseListenAddress('fd00::1:9464'), { host: 'fd00::1', port: 9464 });
      assert.deepEqual(parseListenAddress('localhost:1'), { host: 'localhost', port: 1 });
      for (const bad of ['9464', '127.0.0.1', '127.0.0.1:99999', 'a b:1', ':1']) {
        assert.throws(() => parseListenAddress(bad), RangeError, bad);
      }
    });

    it('serves /metrics, /healthz and /readyz on loopback; ready once the guard is and the source has an answer', async function () {
      const metrics = new GuardMetrics({ maxDevices: 2 });
      const health = new GuardHealth();
      const guard = fakeGuard();
      health.attachGuard(guard);
      metrics.observeGuard(guard);
      const server = await startMetricsServer({
        address: { host: '127.0.0.1', port: 0 },
        metrics: () => metrics.metrics(),
        contentType: metrics.registry.contentType,
        health,
      });
      try {
        const base = `http://${server.endpoint}`;
        assert.match(server.endpoint, /^127\.0\.0\.1:\d+$/);
        assert.equal((await get(`${base}/healthz`)).status, 200);
        const notReady = await get(`${base}/readyz`);
        assert.equal(notReady.status, 503);
        assert.deepEqual(JSON.parse(notReady.body), {
          status: 'unavailable',
          ok: false,
          guard: 'starting',
        });
        guard.emit('ready', { netns: null, devices: [], dryRun: false });
        const rewrite = (device: string): void => {
          guard.emit('rewrite', rewriteEvent(device, MAC_B, MAC_A, 'other'));
        };
        rewrite('flannel.1');
        guard.emit('restored', {
          device: 'flannel.1',
          ifindex: 4,
          mac: MAC_A,
          neighbours: 2,
          latencyMs: 1.5,
          deferred: false,
        });
        guard.emit('offload', { device: 'flannel.1', written: true, dryRun: false });
        guard.emit('contested', { device: 'flannel.1', what: 'mac' });
        guard.emit('verdict', verdictEvent('turned-off'));
        guard.emit('overrun', { cause: 'ENOBUFS' });
        guard.emit('shared', { device: 'flannel.1', others: 2, detail: 'two others' });
        rewrite('flannel-v6.1');
        rewrite('flannel.2'); // past maxDevices: "other"
        const ready = await get(`${base}/readyz`);
        assert.equal(ready.status, 200);
        assert.equal(JSON.parse(ready.body).guard, 'ready');
        const scraped = await get(`${base}/metrics`);
        assert.equal(scraped.status, 200);
        assert.equal(scraped.type, 'text/plain; version=0.0.4; charset=utf-8');
        const exposition = parseExposition(scraped.body);
        const v = (name: string, labels: Record<string, string> = {}): number | undefined =>
          valueOf(exposition, name, labels);
        assert.equal(
          v('flannel_guard_rewrites_total', { device: 'flannel.1', cause: 'another-writer' }),
          1,
        );
        assert.equal(v('flannel_guard_rewrites_total', { device: 'other' }), 1);
        assert.equal(v('flannel_guard_corrections_total', { device: 'flannel.1' }), 1);
        // Drift: set back (0), rewritten and not yet answered (1).
        assert.equal(v('flannel_guard_drift', { device: 'flannel.1' }), 0);
        assert.equal(v('flannel_guard_drift', { device: 'flannel-v6.1' }), 1);
        assert.equal(v('flannel_guard_neighbour_restores_total', { device: 'flannel.1' }), 2);
        assert.equal(v('flannel_guard_offload_applications_total', { device: 'flannel.1' }), 1);
        assert.equal(v('flannel_guard_contested', { device: 'flannel.1', what: 'mac' }), 1);
        assert.equal(
          v('flannel_guard_offload_verdicts_total', {
            device: 'flannel.1',
            verdict: 'broken',
            action: 'turned-off',
          }),
          1,
        );
        assert.equal(v('flannel_guard_offload_broken', { device: 'flannel.1' }), 1);
        assert.equal(v('flannel_guard_netlink_overruns_total'), 1);
        // The kernel's counters as the guard last read them; one it does not keep is absent.
        assert.equal(v('flannel_guard_received_checksum_errors_total', { protocol: 'udp' }), 4);
        assert.equal(v('flannel_guard_received_checksum_errors_total', { protocol: 'tcp' }), 2);
        assert.equal(
          v('flannel_guard_received_checksum_errors_total', { protocol: 'udp6' }),
          undefined,
        );
        assert.equal(v('flannel_guard_other_guards', { device: 'flannel.1' }), 2);
        assert.equal(v('flannel_guard_ready'), 1);
        assert.equal(v('flannel_guard_managed_devices'), 2);
        assert.equal(v('flannel_guard_restore_latency_seconds_count', { device: 'flannel.1' }), 1);
        assert.equal(
          v('flannel_guard_restore_latency_seconds_bucket', { device: 'flannel.1', le: '0.001' }),
          0,
        );
        assert.equal(
          v('flannel_guard_restore_latency_seconds_bucket', { device: 'flannel.1', le: '0.002' }),
          1,
        );
        assert.equal(exposition.types.get('flannel_guard_restore_latency_seconds'), 'histogram');
        assert.ok(v('process_cpu_user_seconds_total') !== undefined, 'the process metrics');
        // promtool check metrics' naming rule: `_total` is a counter's suffix, and a counter's only.
        for (const [name, type] of exposition.types) {
          assert.equal(name.endsWith('_total'), type === 'counter', `${name} is a ${type}`);
        }
        assert.equal(exposition.types.get('nodejs_active_handles'), 'gauge');
        const devices = new Set(
          exposition.samples
            .filter((s) => s.labels.device !== undefined)
            .map((s) => s.labels.device),
        );
        assert.deepEqual([...devices].sort(), ['flannel-v6.1', 'flannel.1', 'other']);
        assert.equal((await get(`${base}/nope`)).status, 404);
        guard.emit('close');
        assert.equal((await get(`${base}/healthz`)).status, 503);
      } finally {
        await server.close();
      }
    });
  });
});
