import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: `${root}wrangler.toml` },
      remoteBindings: false,
      miniflare: {
        // Test-only secrets; production has none (see README "Deploy").
        bindings: {
          TOKEN_SECRET: "test-token-secret-0123456789abcdef",
          ADMIN_TOKEN: "test-admin-token",
        },
      },
    }),
  ],
  root,
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
