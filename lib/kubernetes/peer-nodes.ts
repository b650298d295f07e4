/**
 * Which Node a VTEP MAC belongs to: the one whose backend-data annotation publishes it
 * (`VtepMAC`), as every node's flanneld reads it. Found by listing the Nodes, a page of 100 at a
 * time and at most 100 pages, and kept for 10 minutes: asked only when a peer sends bad
 * checksums, at most once a minute. Listing needs `list` on nodes, which the base RBAC does not
 * grant with --mesh off (deploy/rbac.yaml grants it for the mesh): without it the API answers 403, said once, and
 * the senders are named by their addresses alone.
 */
import { ADDRESS_FAMILIES, DEFAULT_ANNOTATION_PREFIX, readBackendData } from './annotation';
import { isKubernetesApiError, listAllNodes, type KubernetesApi } from './api';

export const PEER_NODES_PAGE = 100;
export const PEER_NODES_MAX_PAGES = 100;
export const PEER_NODES_TTL_MS = 10 * 60_000;

export interface PeerNodesOptions {
  api: Pick<KubernetesApi, 'listNodes'>;
  annotationPrefix?: string;
  /** Why a listing failed: each failure, but a refusal (403) only once. */
  onProblem?: (problem: { forbidden: boolean; error: string }) => void;
  now?: () => number;
}

export class PeerNodes {
  readonly #options: PeerNodesOptions;
  readonly #now: () => number;
  #listed: { at: number; byMac: Map<string, string> } | null = null;
  #listing: Promise<Map<string, string> | null> | null = null;
  #forbidden = false;

  constructor(options: PeerNodesOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** The name of the Node that publishes `mac` (lower case); null when none does or it cannot be known. */
  async nodeFor(mac: string): Promise<string | null> {
    if (this.#forbidden) return null;
    const listed = this.#listed;
    if (listed !== null && this.#now() - listed.at < PEER_NODES_TTL_MS) {
      return listed.byMac.get(mac) ?? null;
    }
    this.#listing ??= this.#list().finally(() => {
      this.#listing = null;
    });
    return (await this.#listing)?.get(mac) ?? null;
  }

  async #list(): Promise<Map<string, string> | null> {
    const prefix = this.#options.annotationPrefix ?? DEFAULT_ANNOTATION_PREFIX;
    const byMac = new Map<string, string>();
    try {
      const { items } = await listAllNodes(this.#options.api, {
        pageSize: PEER_NODES_PAGE,
        maxPages: PEER_NODES_MAX_PAGES,
      });
      for (const node of items) {
        for (const family of ADDRESS_FAMILIES) {
          const reading = readBackendData(node.metadata.annotations, family, prefix);
          if (reading.state === 'valid') byMac.set(reading.mac, node.metadata.name);
        }
      }
    } catch (error) {
      const forbidden = isKubernetesApiError(error) && error.statusCode === 403;
      this.#forbidden = forbidden;
      this.#options.onProblem?.({ forbidden, error: (error as Error).message });
      return null;
    }
    this.#listed = { at: this.#now(), byMac };
    return byMac;
  }
}
