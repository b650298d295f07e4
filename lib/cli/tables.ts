/** The tables `status` prints: the managed devices, and with --mesh the mesh seen from this node. */
import type { MeshSnapshot } from '../mesh/view';
import { onOff } from './output';
import type { StatusReport } from './status';
import type { RecordedChanges } from './undo';

/** Rows under a header, each column as wide as its widest cell, two spaces apart. */
function columns(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => row[i]?.length ?? 0)),
  );
  return [header, ...rows]
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join('');
}

export function formatStatus(report: StatusReport): string {
  const header = ['DEVICE', 'IFINDEX', 'MAC', 'DESIRED', 'MATCH', 'ASSIGN', 'NEIGH', 'OFFLOADS'];
  const rows = report.devices.map((d) => [
    d.name,
    String(d.ifindex),
    d.mac ?? '-',
    d.desiredMac ?? '-',
    d.desiredMac === null ? '-' : d.mac === d.desiredMac ? 'yes' : 'NO',
    d.addrAssignType === null ? '-' : String(d.addrAssignType),
    String(d.permanentNeighbours),
    Object.entries(d.offloads)
      .map(([name, state]) => `${name}=${onOff(state.active)}${state.matchesPolicy ? '' : '(!)'}`)
      .join(' ') || '-',
  ]);
  const ignored = report.ignored.map(
    (d) => `ignored: ${d.name} (kind ${d.kind || 'none'}): not VXLAN, watch leaves it alone\n`,
  );
  if (rows.length === 0) {
    return `no managed devices in ${report.netns ?? 'this namespace'}\n${ignored.join('')}`;
  }
  return columns(header, rows) + ignored.join('');
}

/** The journal's records under the devices: what `flannel-guard undo` would take back. */
export function formatChanges(changes: RecordedChanges): string {
  if (changes.error !== null) return `changes: ${changes.error}\n`;
  if (changes.records.length === 0) return ''; // nothing to take back: the table alone
  const lines = changes.records.map((record) =>
    record.kind === 'offload'
      ? `  ${record.device}${record.netns === null ? '' : ` (netns ${record.netns})`}: ${Object.entries(
          record.before,
        )
          .map(([name, on]) => `${name} was ${onOff(on)}`)
          .join(', ')}`
      : `  ${record.path}: written, ${record.before === null ? 'did not exist' : 'held something else'} before${record.reload === null ? '' : `; re-read by ${record.reload.join(' ')}`}`,
  );
  return `changes (flannel-guard undo takes them back):\n${lines.map((line) => `${line}\n`).join('')}`;
}

/** One row per peer and family, this node's own device first, then the orphan entries. */
export function formatMesh(mesh: Pick<MeshSnapshot, 'table' | 'incomplete'>): string {
  const header = ['NODE', 'DEVICE', 'VTEP IP', 'PUBLISHED MAC', 'ARP MAC', 'FDB DST', 'VERDICT'];
  const own = mesh.table.self.map((row) => [
    `${row.node} (this node)`,
    row.device,
    '-',
    row.publishedMac,
    row.deviceMac ?? '-',
    '-',
    row.verdict,
  ]);
  const peers = mesh.table.peers.map((row) => [
    row.node,
    row.device,
    row.vtepIp,
    row.publishedMac,
    row.arpMac ?? '-',
    row.fdbDst ?? '-',
    row.sharedWith ? `${row.verdict} (${row.sharedWith.join(', ')})` : row.verdict,
  ]);
  const orphans = mesh.table.orphans.map((entry) => [
    '(no node)',
    entry.device,
    entry.kind === 'arp' ? (entry.destination ?? '-') : '-',
    '-',
    entry.kind === 'arp' ? entry.lladdr : '-',
    entry.kind === 'fdb' ? `${entry.lladdr} -> ${entry.destination ?? '-'}` : '-',
    'orphan',
  ]);
  const incomplete = mesh.incomplete.map(
    (peer) => `incomplete: ${peer.node} ${peer.family}: ${peer.reason} (flanneld skips it too)\n`,
  );
  return columns(header, [...own, ...peers, ...orphans]) + incomplete.join('');
}
