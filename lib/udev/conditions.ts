/**
 * The [Match] conditions of a .link file (Host=, KernelVersion=, Architecture=, …) as systemd
 * 252's condition tests judge them, against the facts of the host they are read for.
 */
import { splitWords } from '../core/ini';
import { fnmatch } from '../core/glob';

/** Facts about the host that [Match] conditions test. */
export interface HostFacts {
  hostname: string | null;
  machineId: string | null;
  kernelRelease: string | null;
  /** systemd's architecture name ('x86-64', 'arm64', ...). */
  architecture: string | null;
  kernelCommandLine: string | null;
}

export const CONDITIONS = [
  'Host',
  'Virtualization',
  'KernelCommandLine',
  'KernelVersion',
  'Credential',
  'Architecture',
  'Firmware',
] as const;
export type ConditionName = (typeof CONDITIONS)[number];

/** strverscmp()-like comparison of kernel versions ("5.4.0-42-generic" vs "5.7"). */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string): (number | string)[] =>
    (v.match(/\d+|[^\d.\-+~_]+/g) ?? []).map((p) => (/^\d+$/.test(p) ? Number(p) : p));
  const [x, y] = [parts(a), parts(b)];
  for (let i = 0; i < Math.max(x.length, y.length); i += 1) {
    const p = x[i];
    const q = y[i];
    if (p === undefined) return -1;
    if (q === undefined) return 1;
    if (p === q) continue;
    if (typeof p === 'number' && typeof q === 'number') return p < q ? -1 : 1;
    return String(p) < String(q) ? -1 : 1;
  }
  return 0;
}

/**
 * ConditionKernelVersion= as systemd 252's condition_test_kernel_version() reads it: words, each
 * "OPVERSION" or a glob, all of which must hold; only the first may have its version as the next
 * word ("OP VERSION"). 'unknown' where systemd refuses the expression (an operator alone later).
 */
function testKernelVersion(expression: string, release: string): boolean | 'unknown' {
  const words = splitWords(expression, false);
  let holds = true;
  for (let i = 0; i < words.length; i += 1) {
    const word = words[i] ?? '';
    const op = /^(<=|>=|!=|<|>|=)\s*(.*)$/.exec(word);
    if (!op) {
      holds &&= fnmatch(word, release);
      continue;
    }
    let version = op[2] ?? '';
    if (version === '') {
      if (i !== 0 || i + 1 >= words.length) return 'unknown';
      i += 1;
      version = words[i] ?? '';
    }
    holds &&= compareOrder(op[1] ?? '=', compareVersions(release, version));
  }
  return holds;
}

function compareOrder(op: string, cmp: number): boolean {
  switch (op) {
    case '<':
      return cmp < 0;
    case '<=':
      return cmp <= 0;
    case '>':
      return cmp > 0;
    case '>=':
      return cmp >= 0;
    case '=':
      return cmp === 0;
    default:
      return cmp !== 0;
  }
}

/** A machine ID as sd_id128_from_string() takes it (32 hex digits, or a UUID), lower case. */
function machineIdOf(value: string): string | null {
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value);
  if (!uuid && !/^[0-9a-f]{32}$/i.test(value)) return null;
  return value.replaceAll('-', '').toLowerCase();
}

export function testCondition(
  name: ConditionName,
  value: string,
  host: HostFacts,
): boolean | 'unknown' {
  switch (name) {
    case 'Host': {
      const id = machineIdOf(value);
      if (id !== null)
        return host.machineId === null ? 'unknown' : id === host.machineId.toLowerCase();
      return host.hostname === null ? 'unknown' : fnmatch(value, host.hostname);
    }
    case 'KernelVersion':
      return host.kernelRelease === null ? 'unknown' : testKernelVersion(value, host.kernelRelease);
    case 'Architecture':
      // 'native': the architecture udev was built for, the one it runs on.
      if (value === 'native') return true;
      return host.architecture === null ? 'unknown' : value === host.architecture;
    case 'KernelCommandLine': {
      if (host.kernelCommandLine === null) return 'unknown';
      const words = splitWords(host.kernelCommandLine, false);
      return value.includes('=')
        ? words.includes(value)
        : words.some((word) => word === value || word.startsWith(`${value}=`));
    }
    default:
      return 'unknown';
  }
}
