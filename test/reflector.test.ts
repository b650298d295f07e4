/**
 * The Reflector (lib/kubernetes/reflector.ts) following every Node, through the real client
 * against the fake API server (test/support/fake-apiserver.ts): what its owner builds from
 * `listed` and `changed` must end equal to the server's store after any seeded sequence of
 * writes, deletions, bookmarks, dropped connections, expired watches, compactions and failed
 * lists, and every watch must start where the stream left off (a relist only after a 410).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';

import { decodeNode, listAllNodes, type KubeNode, type KubernetesApi } from '../lib/kubernetes/api';
import { createKubernetesClient } from '../lib/kubernetes/client';
import { Reflector, type WatchRestartEvent } from '../lib/kubernetes/reflector';
import { FakeApiServer } from './support/fake-apiserver';
import { tempDirPrefix } from './support/netns';
import { prng } from './support/prng';

const SEQUENCES = 6;
const STEPS = 30;

describe('Reflector: a watch of every Node through the real client', function () {
  let fake: FakeApiServer;
  let dir: string;
  let api: KubernetesApi;
  const reflectors: Reflector<KubeNode>[] = [];

  beforeEach(async function () {
    fake = await FakeApiServer.start();
    dir = mkdtempSync(tempDirPrefix('reflector'));
    api = await createKubernetesClient({
      kubeconfig: fake.writeKubeconfig(dir),
      requestTimeoutMs: 2000,
    });
  });

  afterEach(async function () {
    for (const reflector of reflectors.splice(0)) reflector.close();
    api.close();
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A reflector of every Node and the map its owner keeps, with what it was told. */
  function follow(random: () => number): {
    reflector: Reflector<KubeNode>;
    nodes: Map<string, string>;
    lists: string[];
    watchesFrom: string[];
    restarts: WatchRestartEvent[];
    /** Watches that started before what the owner already had. */
    backwards: string[];
    unasked: string[];
  } {
    const nodes = new Map<string, string>();
    const lists: string[] = [];
    const watchesFrom: string[] = [];
    const restarts: WatchRestartEvent[] = [];
    /** The newest resourceVersion the owner was given: no watch may start before it. */
    let delivered = 0;
    const backwards: string[] = [];
    /** Lists after the first that no 410 asked for. */
    const unasked: string[] = [];
    let relistsAsked = 0;
    const reflector = new Reflector<KubeNode>(
      {
        what: 'nodes',
        // Pages of two: every list of this test spans several.
        list: () => listAllNodes(api, { pageSize: 2, maxPages: 50 }),
        watch: (options, onEvent) => {
          watchesFrom.push(options.resourceVersion);
          if (Number(options.resourceVersion) < delivered) {
            backwards.push(`a watch from ${options.resourceVersion} after ${delivered}`);
          }
          return api.watchNodes(options, onEvent);
        },
        decode: decodeNode,
        backoff: { initialMs: 5, maxMs: 40 },
        random,
      },
      {
        listed: (items, resourceVersion) => {
          if (lists.length > 0) {
            if (relistsAsked === 0) unasked.push(`a list at ${resourceVersion} after no 410`);
            else relistsAsked -= 1;
          }
          lists.push(resourceVersion);
          delivered = Number(resourceVersion);
          nodes.clear();
          for (const node of items) nodes.set(node.metadata.name, annotationOf(node));
        },
        changed: (type, node, resourceVersion) => {
          delivered = Math.max(delivered, Number(resourceVersion));
          if (type === 'DELETED') nodes.delete(node.metadata.name);
          else nodes.set(node.metadata.name, annotationOf(node));
        },
        reachable: () => undefined,
        failed: () => undefined,
        restarted: (event) => {
          restarts.push(event);
          if (event.reason === 'expired') relistsAsked += 1;
        },
      },
    );
    reflectors.push(reflector);
    return { reflector, nodes, lists, watchesFrom, restarts, backwards, unasked };
  }

  function annotationOf(node: KubeNode): string {
    return node.metadata.annotations?.v ?? '';
  }

  async function converged(nodes: Map<string, string>, names: Set<string>): Promise<void> {
    const expected = (): Map<string, string> =>
      new Map([...names].map((name) => [name, fake.annotations(name).v ?? '']));
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (equalMaps(nodes, expected())) return;
      await delay(10);
    }
    assert.deepEqual(Object.fromEntries(nodes), Object.fromEntries(expected()));
  }

  function equalMaps(a: Map<string, string>, b: Map<string, string>): boolean {
    return a.size === b.size && [...a].every(([key, value]) => b.get(key) === value);
  }

  it('lists in pages, then follows from the list: the owner ends equal to the store', async function () {
    for (let i = 0; i < 5; i += 1) fake.addNode({ name: `n${i}`, annotations: { v: `a${i}` } });
    const { reflector, nodes, lists, watchesFrom } = follow(Math.random);
    reflector.start();
    await converged(nodes, new Set(['n0', 'n1', 'n2', 'n3', 'n4']));
    assert.equal(lists.length, 1);
    assert.deepEqual(watchesFrom, [lists[0]]);
    const listRequests = fake.requests.filter((r) => r.query.limit === '2');
    assert.equal(listRequests.length, 3, 'five Nodes in pages of two');
    fake.setAnnotation('n3', 'v', 'changed');
    fake.deleteNode('n0');
    fake.addNode({ name: 'n5', annotations: { v: 'new' } });
    await converged(nodes, new Set(['n1', 'n2', 'n3', 'n4', 'n5']));
    fake.sendBookmark();
    const bookmarked = fake.resourceVersion;
    const deadline = Date.now() + 10_000;
    while (reflector.resumeVersion !== bookmarked && Date.now() < deadline) await delay(10);
    assert.equal(reflector.resumeVersion, bookmarked);
  });

  for (let sequence = 0; sequence < SEQUENCES; sequence += 1) {
    const seed = 7_000 + sequence;
    it(`seeded sequence ${seed}: writes, deletions and broken watches; the owner converges, a relist only after 410`, async function () {
      const random = prng(seed);
      const names = new Set<string>();
      let created = 0;
      const add = (): void => {
        const name = `n${created++}`;
        fake.addNode({ name, annotations: { v: `v${Math.floor(random() * 1e6)}` } });
        names.add(name);
      };
      for (let i = 0; i < 3; i += 1) add();
      const { reflector, nodes, lists, restarts, backwards, unasked } = follow(random);
      reflector.start();
      let failedLists = 0;
      for (let step = 0; step < STEPS; step += 1) {
        const pick = random();
        const existing = [...names];
        const some = existing[Math.floor(random() * existing.length)];
        if (pick < 0.25 || some === undefined) add();
        else if (pick < 0.5) fake.setAnnotation(some, 'v', `v${Math.floor(random() * 1e6)}`);
        else if (pick < 0.6) {
          fake.deleteNode(some);
          names.delete(some);
        } else if (pick < 0.7) fake.sendBookmark();
        else if (pick < 0.8) fake.dropWatches();
        else if (pick < 0.88) {
          fake.expireWatches();
        } else if (pick < 0.94) {
          // The next list fails once: the one the 410 below asks for.
          fake.fail({ method: 'GET', path: /^\/api\/v1\/nodes$/ }, 500);
          fake.expireWatches();
          failedLists += 1;
        } else fake.compact();
        if (random() < 0.3) await converged(nodes, names);
      }
      await converged(nodes, names);
      assert.deepEqual(backwards, []);
      // One list at the start, then only after a 410 (one may still be under way).
      assert.deepEqual(unasked, []);
      const expired = restarts.filter((restart) => restart.reason === 'expired').length;
      assert.ok(
        lists.length <= 1 + expired && lists.length >= expired,
        `lists ${lists.length}, 410s ${expired}`,
      );
      // A failure is never retried at once: only the end of a healthy watch is.
      for (const restart of restarts.filter((r) => r.reason === 'error')) {
        assert.ok(restart.delayMs > 0, JSON.stringify(restart));
      }
      if (failedLists > 0) assert.ok(restarts.some((r) => r.reason === 'error'));
    });
  }
});
