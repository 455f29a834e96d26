/** How many bulk replays' confirmation marks one router's page remembers as done, beside the audit trail. */
const MARKS_KEPT = 1_000;

/**
 * The replays the operator's page of one router is doing now, and the bulk replays it did (by their
 * confirmation's mark), in this process: a form sent twice at once (a second click, a resend after a proxy's
 * timeout, two tabs) finds the first still under way, before anything is read from the store. The audit
 * trail is where a mark is found from another instance, once the first is done; this is what covers the
 * time the first takes, and a store that keeps no audit trail.
 */
export interface ReplaysUnderWay {
  /**
   * Takes `name` (`key:<key>` or `once:<mark>`) for a replay: `false` when it is taken (under way, or a mark
   * done already), changing nothing. Synchronous: two requests never both take it.
   */
  take(name: string): boolean;
  /** The replay of `name` ended; `done` keeps it taken for good (a mark: its replay is done once). */
  end(name: string, done: boolean): void;
}

const byRouter = new WeakMap<object, ReplaysUnderWay>();

/** The replays under way of `router`'s operator's pages (one set for every page built over the router). */
export function replaysUnderWay(router: object): ReplaysUnderWay {
  let found = byRouter.get(router);
  if (found === undefined) {
    found = createReplaysUnderWay();
    byRouter.set(router, found);
  }
  return found;
}

function createReplaysUnderWay(): ReplaysUnderWay {
  const taken = new Set<string>();
  const done: string[] = [];
  return {
    take(name) {
      if (taken.has(name)) return false;
      taken.add(name);
      return true;
    },
    end(name, finished) {
      if (!finished) {
        taken.delete(name);
        return;
      }
      done.push(name);
      if (done.length > MARKS_KEPT) taken.delete(done.shift()!);
    },
  };
}
