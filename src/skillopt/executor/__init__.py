"""Where rollouts run: in this process (``local``) or as Ray tasks on a cluster (``ray``)."""
