/**
 * Waits between retries that close() can cut short. One wait at a time; its
 * timer is unref'd, since a pending retry must not keep a process alive.
 */
export class Sleeper {
  #wake: (() => void) | undefined;

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wake = undefined;
        resolve();
      }, ms).unref();
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }

  /** Ends the current wait now (nothing when none is running). */
  wake(): void {
    this.#wake?.();
  }
}
