/**
 * `flannel-guard status --mesh`: the mesh seen from this node, once - every Node read (pages of
 * 500) by flannel's rules, this namespace's VTEPs and their permanent ARP/FDB entries dumped,
 * compared as `watch --mesh` compares them (mesh/compare.ts), printed as a table. No grace
 * period: what is, now. Exit 1 when a peer or this node's own device is not `ok`.
 */
import { existsSync } from 'node:fs';

import { AF_BRIDGE, AF_UNSPEC } from '../core/constants';
import { openControl } from '../core/oneshot';
import { toLinkInfo, toNeighbourInfo } from '../core/records';
import type { NeighbourInfo } from '../core/types';
import { netnsTarget } from '../core/validate';
import { DEFAULT_ANNOTATION_PREFIX } from '../kubernetes/annotation';
import { listAllNodes } from '../kubernetes/api';
import { createKubernetesClient } from '../kubernetes/client';
import { detectCluster, type ClusterSettings } from '../kubernetes/cluster';
import { MESH_MAX_PAGES, MESH_PAGE_SIZE, readPeer } from '../kubernetes/mesh-peers';
import {
  compareMesh,
  isHealthyVerdict,
  type IncompletePeer,
  type MeshTable,
} from '../mesh/compare';
import type { NodeLeases } from '../mesh/view';
import { checkNetnsFlag } from './common';
import { UsageError, type Flags } from './flags';
import { writeOut } from './stdio';
import { formatMesh } from './tables';

export interface MeshStatus {
  netns: string | null;
  node: string;
  table: MeshTable;
  incomplete: IncompletePeer[];
  /** Every peer and this node's own device ok (orphans do not stop traffic). */
  consistent: boolean;
}

/** Every Node's leases, read by flannel's rules (one list, in pages of 500). */
export async function listNodeLeases(cluster: ClusterSettings): Promise<NodeLeases[]> {
  const api = await createKubernetesClient(
    cluster.kubeconfig === undefined
      ? { inCluster: cluster.inCluster }
      : { kubeconfig: cluster.kubeconfig },
  );
  try {
    const { items } = await listAllNodes(api, {
      pageSize: MESH_PAGE_SIZE,
      maxPages: MESH_MAX_PAGES,
    });
    return items.flatMap((node) => readPeer(node, DEFAULT_ANNOTATION_PREFIX) ?? []);
  } finally {
    api.close();
  }
}

/** The cluster named by --kubeconfig and --node (or the environment); a usage error without. */
export function clusterFlags(flags: Flags, flag: string): ClusterSettings {
  const cluster = detectCluster(
    { node: flags.value('node'), kubeconfig: flags.value('kubeconfig') },
    process.env,
    existsSync,
  );
  if (!cluster) {
    throw new UsageError(
      `${flag} needs the Nodes: --kubeconfig, or KUBECONFIG with --node or NODE_NAME, or a pod`,
    );
  }
  return cluster;
}

export async function readMeshStatus(options: {
  netns: string | undefined;
  cluster: ClusterSettings;
  directRouting: boolean;
}): Promise<MeshStatus> {
  const { cluster } = options;
  const readings = await listNodeLeases(cluster);
  const leases = readings.flatMap((reading) => reading.leases);
  const control = openControl(netnsTarget(options.netns));
  const entries = new Map<string, NeighbourInfo[]>();
  const deviceMacs = new Map<string, string | null>();
  try {
    const wanted = new Set(leases.map((lease) => lease.device));
    const links = (await control.dumpLinks(true))
      .map((raw) => toLinkInfo(raw))
      .filter((link) => link.kind === 'vxlan' && wanted.has(link.name));
    const neighbours = [
      ...(await control.dumpNeighbours(AF_UNSPEC, true)),
      ...(await control.dumpNeighbours(AF_BRIDGE, true)),
    ].map(toNeighbourInfo);
    for (const link of links) {
      deviceMacs.set(link.name, link.mac);
      entries.set(
        link.name,
        neighbours.filter((entry) => entry.ifindex === link.ifindex && entry.permanent),
      );
    }
  } finally {
    control.close();
  }
  const table = compareMesh({
    self: cluster.nodeName,
    leases,
    entries,
    deviceMacs,
    directRouting: options.directRouting,
  });
  return {
    netns: options.netns ?? null,
    node: cluster.nodeName,
    table,
    incomplete: readings.flatMap((reading) => reading.incomplete),
    consistent: [...table.self, ...table.peers].every((row) => isHealthyVerdict(row.verdict)),
  };
}

export async function meshStatus(flags: Flags): Promise<number> {
  const netns = flags.value('netns');
  checkNetnsFlag(netns);
  const cluster = clusterFlags(flags, '--mesh');
  const status = await readMeshStatus({
    netns,
    cluster,
    directRouting: flags.has('mesh-direct-routing'),
  });
  writeOut(flags.has('json') ? `${JSON.stringify(status)}\n` : formatMesh(status));
  return status.consistent ? 0 : 1;
}
