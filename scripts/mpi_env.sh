# Sourced by the scripts: lets Open MPI run as root (containers, CI) and run
# more ranks than cores, with idle ranks yielding the CPU instead of spinning.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
# PMIx authenticates its own ranks natively: with its munge plugin (the
# default when munge is installed, as the Slurm tests need) a socket left by
# a munged that is no longer running costs every MPI start 2.3 s of retries.
export PMIX_MCA_psec=${PMIX_MCA_psec:-native}
