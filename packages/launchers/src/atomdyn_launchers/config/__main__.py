from atomdyn_launchers.config.cluster import main

raise SystemExit(main())
