import nx from "@nx/eslint-plugin";

export default [
  ...nx.configs["flat/base"],
  ...nx.configs["flat/typescript"],
  { ignores: ["**/dist", "**/node_modules", "**/*.config.*", "**/.tmp"] },
  {
    files: ["**/*.ts"],
    rules: {
      "@nx/enforce-module-boundaries": [
        "error",
        {
          enforceBuildableLibDependency: false,
          allow: [],
          depConstraints: [
            { sourceTag: "type:lib", onlyDependOnLibsWithTags: ["type:lib"] },
            // The CLI's `serve` command loads the server app (lazily), `worker` is the worker app; no lib imports an app.
            { sourceTag: "scope:app", onlyDependOnLibsWithTags: ["type:lib", "scope:server-app", "scope:worker-app"] },
            { sourceTag: "scope:server-app", onlyDependOnLibsWithTags: ["type:lib"] },
            { sourceTag: "scope:worker-app", onlyDependOnLibsWithTags: ["type:lib"] },
            { sourceTag: "scope:schema", onlyDependOnLibsWithTags: [] },
            { sourceTag: "scope:lib", onlyDependOnLibsWithTags: ["scope:schema", "scope:lib"] },
            { sourceTag: "scope:engine", onlyDependOnLibsWithTags: ["scope:schema", "scope:lib"] },
            // @proctor/queue runs the engine's trials on workers: above the engine, below the apps.
            { sourceTag: "scope:queue", onlyDependOnLibsWithTags: ["scope:schema", "scope:lib", "scope:engine"] },
            { sourceTag: "scope:app", onlyDependOnLibsWithTags: ["scope:schema", "scope:lib", "scope:engine", "scope:queue", "scope:server-app", "scope:worker-app"] },
            { sourceTag: "scope:server-app", onlyDependOnLibsWithTags: ["scope:schema", "scope:lib", "scope:engine", "scope:queue"] },
            { sourceTag: "scope:worker-app", onlyDependOnLibsWithTags: ["scope:schema", "scope:lib", "scope:engine", "scope:queue"] },
          ],
        },
      ],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-explicit-any": "off",
      "no-console": "error",
    },
  },
  { files: ["apps/**/*.ts", "tools/**/*.ts", "bench/**/*.ts", "**/*.test.ts"], rules: { "no-console": "off" } },
];
