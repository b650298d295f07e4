/**
 * Preloaded into a guard (`NODE_OPTIONS=--require …/loaded-builtins.js`): when it exits, writes
 * the Node builtins it loaded, as a JSON list, to the file $FG_TEST_LOADED_BUILTINS.
 */
import { writeFileSync } from 'node:fs';

const out = process.env.FG_TEST_LOADED_BUILTINS;
if (out !== undefined) {
  process.on('exit', () => {
    const { moduleLoadList } = process as unknown as { moduleLoadList: readonly string[] };
    const builtins = moduleLoadList
      .filter((entry) => entry.startsWith('NativeModule '))
      .map((entry) => entry.slice('NativeModule '.length));
    writeFileSync(out, JSON.stringify(builtins));
  });
}
