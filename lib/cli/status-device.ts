/**
 * `flannel-guard status` without --mesh: the managed devices once (MAC against the desired one,
 * offloads, neighbours) and what the change journal says watch and doctor --fix changed. Loaded
 * when it runs: `watch` never needs it.
 */
import { readStatus, type StatusOptions } from './status';
import { formatChanges, formatStatus } from './tables';
import { recordedChanges } from './undo';
import { writeOut } from './stdio';

/** Exit 1 when a device's MAC is not the one --mac asks for (offloads are shown, not judged). */
export async function printStatus(
  options: StatusOptions,
  stateDir: string,
  json: boolean,
): Promise<number> {
  const report = await readStatus(options);
  const changes = recordedChanges(stateDir, options.netns);
  writeOut(
    json
      ? `${JSON.stringify({ ...report, changes })}\n`
      : formatStatus(report) + formatChanges(changes),
  );
  return report.devices.some((d) => d.desiredMac !== null && d.mac !== d.desiredMac) ? 1 : 0;
}
