/** The doctor's report for people. */
import type { DoctorChange, DoctorReport } from './index';

const LABEL = { ok: 'OK  ', warn: 'WARN', fail: 'FAIL' } as const;

function onOff(value: boolean): string {
  return value ? 'on' : 'off';
}

/** One line per change, saying exactly what was written (planned: what would be). */
export function describeChange(change: DoctorChange, planned = false): string[] {
  const wrote = planned ? 'would write' : 'wrote';
  switch (change.kind) {
    case 'write-file':
      return [
        `${wrote} ${change.path}:`,
        ...change.content
          .trimEnd()
          .split('\n')
          .map((line) => `    | ${line}`),
      ];
    case 'command':
      if (planned) return [`would run ${change.argv.join(' ')}`];
      return [
        `ran ${change.argv.join(' ')}: ${change.status === 0 ? 'ok' : `failed (${change.status ?? 'not run'})`}${change.output ? ` ${change.output}` : ''}`,
      ];
    case 'not-fixed':
      return [
        `NOT FIXED ${change.check}${change.device ? ` ${change.device}` : ''}: ${change.reason}`,
      ];
    case 'device': {
      const a = change.action;
      switch (a.action) {
        case 'set-mac':
          return a.reason === 'pin'
            ? [`${a.device}: ${wrote} its MAC ${a.to} again (addr_assign_type 1 -> 3)`]
            : [`${a.device}: MAC ${a.from ?? 'none'} -> ${a.to}`];
        case 'replace-neighbour':
          return [
            a.family === 'bridge'
              ? `${a.device}: FDB entry ${a.lladdr} dst ${a.destination} permanent (${a.reason})`
              : `${a.device}: neighbour ${a.destination} lladdr ${a.lladdr} permanent (${a.reason})`,
          ];
        case 'set-offload': {
          if (!('active' in a)) {
            const wanted = Object.entries(a.requested).map(([name, on]) => `${name} ${onOff(on)}`);
            return [`${a.device}: ${wrote} ${wanted.join(', ')}`];
          }
          const features = Object.entries(a.requested).map(
            ([name, wanted]) => `${name} ${onOff(!wanted)} -> ${onOff(a.active[name] ?? !wanted)}`,
          );
          const side = a.sideEffects.map(
            (s) => `${s.name} ${onOff(s.before)} -> ${onOff(s.after)}`,
          );
          return [
            `${a.device}: ${features.join(', ')}${side.length > 0 ? ` (the kernel also changed ${side.join(', ')})` : ''}${a.notApplied.length > 0 ? `; not applied: ${a.notApplied.join(', ')}` : ''}`,
          ];
        }
      }
    }
  }
}

export function formatReport(report: DoctorReport, verbose = false): string {
  const lines: string[] = [];
  const where = [
    `root ${report.root}`,
    report.netns === null
      ? "this process's network namespace"
      : `network namespace ${report.netns}`,
    `kernel ${report.kernel}`,
  ];
  lines.push(`flannel-guard doctor: ${where.join(', ')}`);
  const idWidth = Math.max(...report.checks.map((c) => c.id.length), 4);
  for (const check of report.checks) {
    const subject = check.device === null ? '' : `[${check.device}] `;
    lines.push(`${LABEL[check.verdict]}  ${check.id.padEnd(idWidth)}  ${subject}${check.summary}`);
    const indent = ' '.repeat(6 + idWidth + 2);
    if (check.verdict !== 'ok' || verbose) {
      for (const item of check.evidence) lines.push(`${indent}- ${item}`);
    }
    if (check.fix !== null) lines.push(`${indent}fix: ${check.fix}`);
  }
  if (report.fixed || report.dryRun) {
    const heading = report.dryRun ? 'Would change (a dry run: nothing was changed)' : 'Changed';
    lines.push('');
    if (report.changes.length === 0)
      lines.push(`${heading}: nothing (nothing --fix can change was wrong)`);
    else {
      lines.push(`${heading}:`);
      for (const change of report.changes) {
        for (const line of describeChange(change, report.dryRun)) lines.push(`  ${line}`);
      }
    }
  }
  lines.push('');
  lines.push(
    `${report.counts.fail} fail, ${report.counts.warn} warn, ${report.counts.ok} ok${report.fixed ? ' (after --fix)' : ''}`,
  );
  return `${lines.join('\n')}\n`;
}
