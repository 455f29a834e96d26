/** What a command writes to and reads from: the process's, or a test's. */
export interface CliIo {
  stdout: (line: string) => void;
  stderr: (line: string) => void;
  env: Record<string, string | undefined>;
  /**
   * `inbox replay --wait`'s times, in ms: how often it reads the progress (`pollMs`, 1 s) and how long
   * nothing may move before it gives up (`stallMs`, 5 minutes). Unset for the process: a test's, shorter.
   */
  replayWait?: { pollMs: number; stallMs: number };
}
