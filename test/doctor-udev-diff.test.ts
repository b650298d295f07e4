/**
 * The doctor's .link reading, differentially against the real udev 252 on
 * random seeded trees (see support/link-oracle.ts): on every tree the doctor
 * must name the file udev applies and whether it rewrites the MAC, or warn
 * (files that "may apply") exactly where the outcome hangs on something a
 * copied tree cannot show - and then udev's choice must be among them.
 * FG_LINK_TREES sets how many trees (default 200), FG_LINK_SEED the first seed.
 */
import assert from 'node:assert/strict';

import { compareTree } from './support/link-oracle';
import { Netns } from './support/netns';

const TREES = Number(process.env.FG_LINK_TREES ?? 200);
const FIRST_SEED = Number(process.env.FG_LINK_SEED ?? 0x11c0);

describe(`doctor vs the real udev 252: ${TREES} random .link trees (seeds from ${FIRST_SEED})`, function () {
  this.timeout(600_000);
  let ns: Netns;

  before(async function () {
    ns = await Netns.create('fgt-ldiff');
  });

  after(async function () {
    await ns.destroy();
  });

  it('agrees on every tree, or warns where udev chose among the files it named', async function () {
    const disagreements: string[] = [];
    let warned = 0;
    for (let seed = FIRST_SEED; seed < FIRST_SEED + TREES; seed += 1) {
      const result = await compareTree(ns, seed);
      if (result.warned) warned += 1;
      if (!result.agreed) disagreements.push(result.detail);
    }
    console.log(`      ${TREES - disagreements.length} of ${TREES} agreed; ${warned} warned`);
    assert.deepEqual(disagreements.slice(0, 5), [], `${disagreements.length} disagreements`);
  });
});
