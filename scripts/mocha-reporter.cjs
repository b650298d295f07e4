'use strict';
// Mocha's spec output for people, plus mocha's own JSON reporter writing the
// machine-readable results (reporter option `output`) that scripts/run-tests.mjs counts,
// and at the end the wall time of each test file (its hooks included), longest first: what
// a CI run spent where.
const Mocha = require('mocha');
const { relative } = require('node:path');
const { performance } = require('node:perf_hooks');

class SpecWithJson extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    new Mocha.reporters.JSON(runner, options);
    const started = new Map();
    const spent = new Map();
    runner.on(Mocha.Runner.constants.EVENT_SUITE_BEGIN, (suite) => {
      if (suite.file && suite.parent?.root) started.set(suite, performance.now());
    });
    runner.on(Mocha.Runner.constants.EVENT_SUITE_END, (suite) => {
      const start = started.get(suite);
      if (start === undefined) return;
      const file = relative(process.cwd(), suite.file);
      spent.set(file, (spent.get(file) ?? 0) + performance.now() - start);
    });
    runner.once(Mocha.Runner.constants.EVENT_RUN_END, () => {
      const rows = [...spent].sort((a, b) => b[1] - a[1]);
      const total = rows.reduce((sum, [, ms]) => sum + ms, 0);
      console.log(`\n  time per test file (${(total / 60_000).toFixed(1)} min in all):`);
      for (const [file, ms] of rows)
        console.log(`  ${(ms / 1000).toFixed(1).padStart(8)} s  ${file}`);
    });
  }
}

module.exports = SpecWithJson;
