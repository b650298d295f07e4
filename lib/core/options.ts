/**
 * The one place where an option's value is checked, for the library and the CLI alike: a
 * library caller's misspelt name or value is EINVAL naming the option (`option NAME`, which the
 * CLI prints as its flag), never a silent default. Each entry point (guardConfig, readStatus,
 * ensureVtep, runDoctor) lists its names once and checks each value here.
 */
import { DEFAULT_OFFLOAD } from './defaults';
import { invalidArgument } from './errors';
import { openControl } from './oneshot';
import { integerInRange, type NumberRange } from './validate';

/** Rejects a name `known` does not list: a misspelt `pin` must not act as its default. */
export function rejectUnknownOptions(
  options: object,
  known: readonly string[],
  where: string,
  prefix = '',
): void {
  // A JavaScript caller may pass anything.
  const given: unknown = options;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw invalidArgument(`${where}: expected an object of options, got ${describe(given)}`);
  }
  for (const name of Object.keys(options)) {
    if (!known.includes(name)) {
      throw invalidArgument(
        `${where}: unknown option ${prefix}${name} (known: ${known.map((k) => prefix + k).join(', ')})`,
        { option: `${prefix}${name}` },
      );
    }
  }
}

/** A wrong value as a message shows it: a string as it is, anything else by its type. */
function describe(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return value;
    case 'number':
    case 'boolean':
    case 'bigint':
      return `${typeof value} ${String(value)}`;
    case 'object':
      return value === null ? 'null' : Array.isArray(value) ? 'an array' : 'an object';
    default:
      return typeof value;
  }
}

/** One of `choices`, or `fallback` when undefined. */
export function choiceOption<Choice extends string>(
  value: unknown,
  choices: readonly Choice[],
  option: string,
  fallback: Choice,
): Choice {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !(choices as readonly string[]).includes(value)) {
    throw invalidArgument(
      `option ${option} ${typeof value === 'string' ? value : describe(value)}: expected ${choices.join(' or ')}`,
      { option },
    );
  }
  return value as Choice;
}

/** true or false, or `fallback` when undefined (1, 'yes' or 'false' are mistakes, not truths). */
/** A whole number within `range` (`fallback` when absent), or EINVAL naming the option. */
export function integerOption(
  value: unknown,
  range: NumberRange,
  option: string,
  fallback: number,
): number {
  if (value === undefined) return fallback;
  try {
    return integerInRange(value, range, `option ${option}`);
  } catch (error) {
    throw Object.assign(error as Error, { option });
  }
}

export function booleanOption(value: unknown, option: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') {
    throw invalidArgument(`option ${option} ${describe(value)}: expected true or false`, {
      option,
    });
  }
  return value;
}

/** An absolute path (a relative one would depend on the process's working directory). */
export function absolutePathOption(value: unknown, option: string): string {
  if (typeof value !== 'string' || !value.startsWith('/') || value.includes('\0')) {
    throw invalidArgument(`option ${option} ${describe(value)}: expected an absolute path`, {
      option,
    });
  }
  return value;
}

/** A list of strings (the interface globs, the peers), each checked by `item`. */
export function listOption<Item>(
  value: unknown,
  option: string,
  item: (entry: unknown) => Item,
): Item[] {
  if (!Array.isArray(value)) {
    throw invalidArgument(`option ${option} ${describe(value)}: expected a list`, { option });
  }
  return value.map((entry: unknown) => item(entry));
}

let featureNames: ReadonlySet<string> | undefined;

/**
 * Every offload feature name the running kernel knows (ETH_SS_FEATURES, the set `ethtool -k`
 * prints). The set is the kernel's, the same in every namespace and for every device, so it is
 * read once per process, from `lo` in the process's own namespace.
 */
export function kernelFeatureNames(): ReadonlySet<string> {
  if (featureNames === undefined) {
    const control = openControl(null);
    try {
      featureNames = new Set(control.getFeatures('lo').features.map((feature) => feature.name));
    } finally {
      control.close();
    }
  }
  return featureNames;
}

/**
 * An offload policy: a record of kernel feature names to on (true) or off (false), or one of
 * the `keywords` ('none', and for the guard 'auto'); undefined when not given.
 */
export function offloadOption<Keyword extends string>(
  value: unknown,
  keywords: readonly Keyword[],
  option = 'offload',
): Readonly<Record<string, boolean>> | Keyword | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string') {
    if ((keywords as readonly string[]).includes(value)) return value as Keyword;
    throw invalidArgument(
      `option ${option} ${value}: expected ${keywords.join(' or ')} or a record of FEATURE: true|false`,
      { option },
    );
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidArgument(
      `option ${option} ${describe(value)}: expected a record of FEATURE: true|false`,
      { option },
    );
  }
  const policy: Record<string, boolean> = {};
  for (const [feature, on] of Object.entries(value as Record<string, unknown>)) {
    if (!kernelFeatureNames().has(feature)) {
      throw invalidArgument(`option ${option}: unknown feature ${feature} (see ethtool -k)`, {
        option,
      });
    }
    if (typeof on !== 'boolean') {
      throw invalidArgument(
        `option ${option}: feature ${feature} ${describe(on)}: expected true (on) or false (off)`,
        { option },
      );
    }
    policy[feature] = on;
  }
  return Object.freeze(policy);
}

/**
 * A fixed offload policy, as `status`, `ensureVtep` and the doctor take one: the product's
 * default when not given, nothing for 'none'.
 */
export function fixedOffloadPolicy(value: unknown): Readonly<Record<string, boolean>> {
  const policy = offloadOption(value, ['none']) ?? DEFAULT_OFFLOAD;
  return policy === 'none' ? NO_OFFLOAD_POLICY : policy;
}

const NO_OFFLOAD_POLICY: Readonly<Record<string, boolean>> = Object.freeze({});
