# `cmake --install build --prefix P`: the four binaries, the Python sim_bridge client, the example
# configs with the data they name, the docs and the example reward plugin; and the Debian package
# CPack makes of the same files (`cpack -G DEB` in the build folder). docs/install.md.
include(GNUInstallDirs)
# Installing (and cpack) takes what the build made; it does not build every test first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

install(TARGETS rlforge rlforge-actor rlforge-store rlforge-lm
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS launch/get-smollm2 DESTINATION ${CMAKE_INSTALL_BINDIR}
        RENAME rlforge-get-smollm2)
install(TARGETS rlforge_keyword_reward LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/rlforge/plugins)

set(RLFORGE_SHARE ${CMAKE_INSTALL_DATADIR}/rlforge)
install(DIRECTORY configs DESTINATION ${RLFORGE_SHARE})
install(DIRECTORY data/word_problems DESTINATION ${RLFORGE_SHARE}/data)
install(FILES reward/examples/keyword_reward.c reward/examples/arith_reward.py
              sim_bridge/python/examples/cartpole_py.py
        DESTINATION ${RLFORGE_SHARE}/examples)
install(PROGRAMS tools/chaos.py DESTINATION ${RLFORGE_SHARE}/tools)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Debian's python3 looks in /usr/lib/python3/dist-packages; under another prefix, PYTHONPATH.
install(DIRECTORY sim_bridge/python/rlforge_sim DESTINATION lib/python3/dist-packages
        PATTERN __pycache__ EXCLUDE)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rlforge)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "rlforge developers <rlforge@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "reinforcement-learning post-training: PPO, GRPO and DPO jobs from one YAML file")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The shared libraries the binaries link (libtorch, zmq, protobuf, yaml-cpp, ...) come from
# dpkg-shlibdeps; what they open or run at run time is named here.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libopenblas0-pthread, python3, python3-zmq, python3-protobuf, python3-yaml")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-pip, slurm-client")
include(CPack)
