/**
 * The one change flannel-guard makes to a network configuration list: its plugin as the last
 * entry of `plugins`, inserted as text so that every other byte of the file stays as its author
 * (flannel's installer) wrote it, and taken out again byte for byte. Pure: text in, text out.
 */

/** What a conflist holds for this change, or why it is left alone. */
export type ConflistEdit =
  { kind: 'insert'; text: string } | { kind: 'present' } | { kind: 'refused'; reason: string };

export const SHIM_TYPE = 'flannel-guard-cni';

interface Span {
  start: number;
  end: number;
}

/** Where each element of the top-level `plugins` array is, by a scan beside JSON.parse's. */
function pluginSpans(text: string): { array: Span; elements: Span[] } | null {
  let i = 0;
  const space = (): void => {
    while (i < text.length && ' \t\n\r'.includes(text[i] ?? '')) i += 1;
  };
  const string = (): void => {
    i += 1;
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i += 1;
  };
  // Skips a value (the text parsed already: it is valid JSON).
  const value = (): void => {
    space();
    const c = text[i];
    if (c === '"') {
      string();
      return;
    }
    if (c === '{' || c === '[') {
      const close = c === '{' ? '}' : ']';
      i += 1;
      space();
      while (text[i] !== close) {
        if (c === '{') {
          string();
          space();
          i += 1; // ':'
        }
        value();
        space();
        if (text[i] === ',') i += 1;
        space();
      }
      i += 1;
      return;
    }
    while (i < text.length && !',]} \t\n\r'.includes(text[i] ?? '')) i += 1;
  };
  let found: { array: Span; elements: Span[] } | null = null;
  space();
  i += 1; // '{'
  space();
  while (i < text.length && text[i] !== '}') {
    const keyStart = i;
    string();
    const key = JSON.parse(text.slice(keyStart, i)) as string;
    space();
    i += 1; // ':'
    space();
    if (key === 'plugins' && text[i] === '[') {
      const array: Span = { start: i, end: 0 };
      const elements: Span[] = [];
      i += 1;
      space();
      while (text[i] !== ']') {
        const start = i;
        value();
        elements.push({ start, end: i });
        space();
        if (text[i] === ',') i += 1;
        space();
      }
      i += 1;
      array.end = i;
      found = { array, elements }; // the last of a repeated key wins, as JSON.parse has it
    } else {
      value();
    }
    space();
    if (text[i] === ',') i += 1;
    space();
  }
  return found;
}

function parse(text: string): { plugins: unknown[] } | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    return `not JSON (${error instanceof Error ? error.message : String(error)})`;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return 'not a JSON object';
  }
  const plugins = (parsed as { plugins?: unknown }).plugins;
  if (!Array.isArray(plugins) || plugins.length === 0) {
    return 'no plugins list (a single-plugin .conf is not chained)';
  }
  return { plugins };
}

const isShim = (plugin: unknown): boolean =>
  typeof plugin === 'object' &&
  plugin !== null &&
  (plugin as { type?: unknown }).type === SHIM_TYPE;

/** The conflist with `entry` as its last plugin, or why not. */
export function withShim(text: string, entry: Readonly<Record<string, unknown>>): ConflistEdit {
  const parsed = parse(text);
  if (typeof parsed === 'string') return { kind: 'refused', reason: parsed };
  if (parsed.plugins.some(isShim)) return { kind: 'present' };
  const spans = pluginSpans(text);
  const last = spans?.elements[spans.elements.length - 1];
  if (spans === null || last === undefined) return { kind: 'refused', reason: 'no plugins list' };
  // Indented as the entry before it, on a line of its own when that one is.
  const lineStart = text.lastIndexOf('\n', last.start) + 1;
  const indent = text.slice(lineStart, last.start);
  const separator = /^[ \t]*$/.test(indent) && lineStart > 0 ? `,\n${indent}` : ', ';
  const inserted = `${text.slice(0, last.end)}${separator}${JSON.stringify(entry)}${text.slice(last.end)}`;
  return { kind: 'insert', text: inserted };
}

/** The conflist without flannel-guard's entries (each with the separator before it); null: none. */
export function withoutShim(text: string): string | null {
  const parsed = parse(text);
  if (typeof parsed === 'string' || !parsed.plugins.some(isShim)) return null;
  const spans = pluginSpans(text);
  if (spans === null) return null;
  let result = text;
  // From the last, so that the spans before stay where they are.
  for (let k = spans.elements.length - 1; k >= 0; k -= 1) {
    const element = spans.elements[k] as Span;
    if (!isShim(parsed.plugins[k])) continue;
    const previous = spans.elements[k - 1];
    const next = spans.elements[k + 1];
    const [from, to] =
      previous !== undefined
        ? [previous.end, element.end]
        : [element.start, next !== undefined ? next.start : element.end];
    result = result.slice(0, from) + result.slice(to);
  }
  return result;
}
