/**
 * What a Node publishes for the mesh, read by flannel's own rules (flannel-io/flannel cdf76059,
 * pkg/subnet/kube/kube.go):
 * - only Nodes annotated `<prefix>/kube-subnet-manager: "true"` have a lease (:298, :315);
 * - the public IP is `<prefix>/public-ip` (`public-ipv6`), parsed strictly (nodeToLease,
 *   :542-548, :582-587); `public-ip-overwrite` is copied into it by the Node's own flanneld
 *   (:420-441), so other nodes, and this reading, never look at the overwrite;
 * - the subnet is the first IPv4 (IPv6) CIDR of `spec.podCIDRs`, or `spec.podCIDR` when the list
 *   is empty; three or more CIDRs is an error (:550-580, :589-620); the entries use its first
 *   address (ip.FromIPNet: the masked network);
 * - the backend data is `<prefix>/backend-data` (`backend-v6-data`), and a backend type other
 *   than vxlan is skipped (vxlan_network.go:271).
 * A family whose data is incomplete yields no lease: flanneld programs nothing for it either
 * (it logs "Error turning node to lease" and skips the Node), so the guard never repairs it.
 */
import { ipVersion } from '../core/validate';
import type { MeshFamily } from '../mesh/compare';
import type { NodeLeases } from '../mesh/view';
import { ADDRESS_FAMILIES, readBackendData } from './annotation';
import { decodeNode, listAllNodes, type KubeNode, type KubernetesApi } from './api';
import { Reflector, type WatchRestartEvent } from './reflector';

/** Every Node in pages of this many (at most MESH_MAX_PAGES pages: a bound, not a cluster size). */
export const MESH_PAGE_SIZE = 500;
export const MESH_MAX_PAGES = 100;

export interface MeshNodeWatchOptions {
  api: Pick<KubernetesApi, 'listNodes' | 'watchNodes'>;
  annotationPrefix: string;
  /** Where the Nodes' leases go: a whole list, then each change. */
  view: {
    setNodes(nodes: readonly NodeLeases[]): void;
    updateNode(name: string, leases: NodeLeases | null): void;
  };
  /** A list or watch failed (403: `list`/`watch` on nodes not granted). */
  onProblem?: (problem: { reading: 'list' | 'watch'; error: unknown }) => void;
  onRestart?: (event: WatchRestartEvent) => void;
  /** Reflector's watch timeout range (s), for tests. */
  watchTimeoutSeconds?: readonly [number, number];
}

/**
 * One watch of every Node (list in pages, then watch from the list's resourceVersion with
 * bookmarks; 410 lists again; one backoff): the Reflector, feeding each Node's leases to the
 * mesh view. Needs `list` and `watch` on nodes (deploy/rbac.yaml).
 */
export class MeshNodeWatch {
  readonly #reflector: Reflector<KubeNode>;

  constructor(options: MeshNodeWatchOptions) {
    const { api, annotationPrefix: prefix, view } = options;
    const leasesOf = (node: KubeNode): NodeLeases =>
      readPeer(node, prefix) ?? { node: node.metadata.name, leases: [], incomplete: [] };
    this.#reflector = new Reflector<KubeNode>(
      {
        what: 'nodes',
        list: () => listAllNodes(api, { pageSize: MESH_PAGE_SIZE, maxPages: MESH_MAX_PAGES }),
        watch: (watchOptions, onEvent) => api.watchNodes(watchOptions, onEvent),
        decode: decodeNode,
        ...(options.watchTimeoutSeconds
          ? { watchTimeoutSeconds: options.watchTimeoutSeconds }
          : {}),
      },
      {
        listed: (nodes) => {
          view.setNodes(nodes.map(leasesOf));
        },
        changed: (type, node) => {
          view.updateNode(node.metadata.name, type === 'DELETED' ? null : leasesOf(node));
        },
        reachable: () => undefined,
        failed: (error, reading) => options.onProblem?.({ reading, error }),
        restarted: (event) => options.onRestart?.(event),
      },
    );
  }

  start(): void {
    this.#reflector.start();
  }

  close(): void {
    this.#reflector.close();
  }
}

const PUBLIC_IP_KEY: Record<MeshFamily, string> = { ipv4: 'public-ip', ipv6: 'public-ipv6' };

/** The Node's leases; null when flannel's kube subnet manager does not manage it. */
export function readPeer(node: KubeNode, prefix: string): NodeLeases | null {
  const annotations = node.metadata.annotations;
  if (annotations?.[`${prefix}/kube-subnet-manager`] !== 'true') return null;
  const reading: NodeLeases = { node: node.metadata.name, leases: [], incomplete: [] };
  for (const family of ADDRESS_FAMILIES) {
    const data = readBackendData(annotations, family, prefix);
    if (data.state === 'absent') continue;
    const incomplete = (reason: string): void => {
      reading.incomplete.push({ node: reading.node, family, reason });
    };
    if (data.state === 'invalid') {
      incomplete(`${data.key}: ${data.reason}`);
      continue;
    }
    const version = family === 'ipv4' ? 4 : 6;
    const publicKey = `${prefix}/${PUBLIC_IP_KEY[family]}`;
    const publicIp = annotations[publicKey];
    if (publicIp === undefined || ipVersion(publicIp) !== version) {
      incomplete(
        `${publicKey}: ${JSON.stringify(publicIp ?? null)} is not an IPv${version} address`,
      );
      continue;
    }
    const subnet = leaseSubnet(node.spec, version);
    if (typeof subnet === 'string') {
      incomplete(subnet);
      continue;
    }
    reading.leases.push({
      node: reading.node,
      family,
      device: data.device,
      vtepIp: subnet.first,
      mac: data.mac,
      publicIp: canonicalIp(publicIp),
    });
  }
  return reading;
}

/** The lease subnet's first address, or why there is none (flannel's nodeToLease). */
function leaseSubnet(spec: KubeNode['spec'], version: 4 | 6): { first: string } | string {
  const cidrs = spec?.podCIDRs ?? [];
  if (cidrs.length >= 3) return `spec.podCIDRs has ${cidrs.length} CIDRs (at most one per family)`;
  const candidates = cidrs.length === 0 ? [spec?.podCIDR ?? ''] : cidrs;
  for (const cidr of candidates) {
    const network = networkAddress(cidr);
    if (network === null) return `pod CIDR ${JSON.stringify(cidr)} is not a CIDR`;
    if (ipVersion(network) === version) return { first: network };
  }
  return `no IPv${version} pod CIDR in spec.podCIDRs`;
}

/** `a.b.c.d/n` or `x::y/n` masked to its network address (canonical text); null if malformed. */
export function networkAddress(cidr: string): string | null {
  const slash = cidr.indexOf('/');
  if (slash < 0) return null;
  const address = cidr.slice(0, slash);
  const bitsText = cidr.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bitsText)) return null;
  const bits = Number(bitsText);
  const version = ipVersion(address);
  if (version === 0 || bits > (version === 4 ? 32 : 128)) return null;
  const width = version === 4 ? 32 : 128;
  const value = version === 4 ? ipv4Value(address) : ipv6Value(canonicalIp(address));
  const mask = ((1n << BigInt(bits)) - 1n) << BigInt(width - bits);
  const network = value & mask;
  if (version === 4) {
    return [24n, 16n, 8n, 0n].map((shift) => String((network >> shift) & 255n)).join('.');
  }
  const groups: string[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) {
    groups.push(((network >> shift) & 0xffffn).toString(16));
  }
  return canonicalIp(groups.join(':'));
}

function ipv4Value(address: string): bigint {
  return address.split('.').reduce((value, part) => (value << 8n) | BigInt(Number(part)), 0n);
}

/** Eight groups of an IPv6 address in canonical form (no embedded IPv4: canonicalIp removed it). */
function ipv6Value(address: string): bigint {
  const [head = '', tail] = address.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = new Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].reduce(
    (value, group) => (value << 16n) | BigInt(parseInt(group, 16)),
    0n,
  );
}

/** An address as the kernel's dumps print it: IPv4 as is, IPv6 in RFC 5952 form. */
export function canonicalIp(address: string): string {
  if (ipVersion(address) !== 6) return address;
  return new URL(`http://[${address}]/`).hostname.slice(1, -1);
}
