/**
 * A parser for the Prometheus text exposition format (version 0.0.4), as
 * prom-client writes it: `# HELP`, `# TYPE`, and `name{label="value",...} value`
 * samples with escaped label values. Enough to scrape /metrics in tests.
 */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  samples: Sample[];
  types: Map<string, string>;
  help: Map<string, string>;
}

/** A float as Go's strconv.ParseFloat reads it (Inf and NaN in any case; prom-client writes "Nan"). */
function parseValue(text: string): number {
  const lower = text.toLowerCase();
  if (lower === '+inf' || lower === 'inf') return Infinity;
  if (lower === '-inf') return -Infinity;
  if (lower === 'nan') return NaN;
  const value = Number(text);
  if (Number.isNaN(value)) throw new Error(`not a sample value: ${text}`);
  return value;
}

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  const pattern = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?/y;
  let index = 0;
  while (index < text.length) {
    pattern.lastIndex = index;
    const match = pattern.exec(text);
    if (!match?.[1]) throw new Error(`bad labels: {${text}}`);
    labels[match[1]] = (match[2] ?? '').replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    index = pattern.lastIndex;
  }
  return labels;
}

export function parseExposition(text: string): Exposition {
  const exposition: Exposition = { samples: [], types: new Map(), help: new Map() };
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const comment = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (comment?.[1] && comment[2]) {
      (comment[1] === 'HELP' ? exposition.help : exposition.types).set(
        comment[2],
        comment[3] ?? '',
      );
      continue;
    }
    if (line.startsWith('#')) continue;
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!sample?.[1] || sample[3] === undefined) throw new Error(`not a sample line: ${line}`);
    exposition.samples.push({
      name: sample[1],
      labels: sample[2] === undefined ? {} : parseLabels(sample[2]),
      value: parseValue(sample[3]),
    });
  }
  return exposition;
}

/** The value of the sample `name` whose labels include `labels`; undefined when absent. */
export function valueOf(
  exposition: Exposition,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const found = exposition.samples.find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  return found?.value;
}

/** Every sample of `name`. */
export function samplesOf(exposition: Exposition, name: string): Sample[] {
  return exposition.samples.filter((s) => s.name === name);
}
