'use strict';
// Mocha's spec output for people, plus mocha's own JSON reporter writing the
// machine-readable results (reporter option `output`) that scripts/run-tests.mjs counts.
const Mocha = require('mocha');

class SpecWithJson extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    new Mocha.reporters.JSON(runner, options);
  }
}

module.exports = SpecWithJson;
