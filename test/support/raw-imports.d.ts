/** Vite's `?raw` imports: a file's text, for tests that check shipped files (e.g. .dev.vars.example). */
declare module "*?raw" {
  const text: string;
  export default text;
}
