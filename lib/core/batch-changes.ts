/**
 * Where each link and neighbour entry changes later in a batch of the native core's items:
 * what LinkMonitor's getters answer for "as the kernel had it before the rest of the batch"
 * (LinkMonitor.rewrittenLater, the delivered view of a listener).
 */
import type {
  RawLinkItem,
  RawMirroredLink,
  RawMonitorItem,
  RawNeighbour,
  RawNeighbourItem,
} from './binding';
import { neighbourKey, toNeighbourInfo } from './records';

/** Where each link and entry changes in a batch: keyed once, when the first query needs it. */
export class BatchChanges {
  readonly links = new Map<number, { position: number; item: RawLinkItem }[]>();
  readonly neighbours = new Map<string, { position: number; item: RawNeighbourItem }[]>();

  constructor(batch: readonly RawMonitorItem[]) {
    batch.forEach((item, position) => {
      if (item.kind === 'link' && item.change !== undefined) {
        const changes = this.links.get(item.ifindex) ?? [];
        changes.push({ position, item });
        this.links.set(item.ifindex, changes);
      } else if (item.kind === 'neigh') {
        const key = neighbourKey(toNeighbourInfo(item.record));
        const changes = this.neighbours.get(key) ?? [];
        changes.push({ position, item });
        this.neighbours.set(key, changes);
      }
    });
  }
}

/** The first change of each link and entry after a position of a batch. */
export class LaterChanges {
  readonly links = new Map<number, RawLinkItem>();
  readonly neighbours = new Map<string, RawNeighbourItem>();

  constructor(batch: BatchChanges, after: number) {
    for (const [ifindex, changes] of batch.links) {
      const first = changes.find((change) => change.position > after);
      if (first) this.links.set(ifindex, first.item);
    }
    for (const [key, changes] of batch.neighbours) {
      const first = changes.find((change) => change.position > after);
      if (first) this.neighbours.set(key, first.item);
    }
  }

  /** The link before its first later change; null when it did not exist yet, undefined when unchanged. */
  link(ifindex: number): RawMirroredLink | null | undefined {
    const item = this.links.get(ifindex);
    if (item === undefined) return undefined;
    if (item.change === 'added') return null;
    return (item.change === 'removed' ? item.record : item.previous) ?? null;
  }

  neighbour(key: string): RawNeighbour | null | undefined {
    const item = this.neighbours.get(key);
    if (item === undefined) return undefined;
    if (item.change === 'added') return null;
    return (item.change === 'removed' ? item.record : item.previous) ?? null;
  }
}
