// node-gyp-build ships no types: the two calls used here.
declare module 'node-gyp-build' {
  /** Loads the addon of the package in `dir`: build/Release, build/Debug, then prebuilds/. */
  function load(dir: string): unknown;
  namespace load {
    /** The path `load` would use; throws when there is none. */
    function resolve(dir: string): string;
  }
  export = load;
}
