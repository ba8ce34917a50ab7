// The repository's root directory, for scripts that read its files or start its Worker wherever
// they are run from.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
