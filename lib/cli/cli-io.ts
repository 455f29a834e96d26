/** What a command writes to and reads from: the process's, or a test's. */
export interface CliIo {
  stdout: (line: string) => void;
  stderr: (line: string) => void;
  env: Record<string, string | undefined>;
}
