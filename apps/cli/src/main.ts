#!/usr/bin/env node
process.stdout.write("proctor 0.1.0\n");
